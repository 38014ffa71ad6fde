// SyncBatchNorm: the global-statistics training op (forward and backward side by side), the layer, and the
// in-place conversion of a model's BatchNorm layers.
#include <tapegrad/framework/distributed/sync_batch_norm.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/distributed/detail/comm_profile.h>
#include <tapegrad/framework/distributed/detail/sync_batch_norm_passes.h>
#include <tapegrad/layers/sequential.h>

namespace tapegrad::distributed {

namespace {

using Doubles = std::vector<double>;

using Layout = detail::ChannelLayout;
using detail::grad_input;
using detail::local_grad_sums;
using detail::local_moments;
using detail::normalize;

Layout check_input(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  x.check_defined(op);
  // Note: up to 5 dims, as PyTorch's SyncBatchNorm, so that convert_sync_batchnorm may replace a BatchNorm3d.
  if (x.dim() < 2 || x.dim() > 5)
    fail("{}: expected input [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W], got {}", op,
         shape_string(x.shape()));
  if (!is_floating(x.dtype())) fail("{}: expected a float32 or float64 input, got {}", op, dtype_name(x.dtype()));
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    if (t->shape() != Shape{x.size(1)} || t->dtype() != x.dtype())
      fail("{}: {} must be {} [{}] for input {}, got {} {}", op, name, dtype_name(x.dtype()), x.size(1),
           shape_string(x.shape()), dtype_name(t->dtype()), shape_string(t->shape()));
  }
  Layout layout{x.size(0), x.size(1), 1};
  for (std::int64_t d = 2; d < x.dim(); ++d) layout.s *= x.size(d);
  return layout;
}

Doubles channel_values(const Tensor& t, std::int64_t channels, double fallback) {
  if (!t.defined()) return Doubles(static_cast<std::size_t>(channels), fallback);
  return t.to_vector();
}

Tensor channel_tensor(const Doubles& values, DType dtype) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())}, TensorOptions{}.with_dtype(dtype));
}

// This layer's label for part `what` in the communication profile (TAPEGRAD_COMM_PROFILE=1); empty, and
// nothing recorded, when the profile is off.
std::string part(const Layout& l, const char* what) {
  return detail::comm_profile_on() ? fmt::format("sync_bn C={} {}", l.c, what) : std::string();
}

template <class Fn>
void dispatch(DType dtype, Fn fn) {
  if (dtype == DType::Float64)
    fn(double{});
  else
    fn(float{});
}

}  // namespace

// Note: the statistics are merged from per-rank (count, mean, M2) rather than summed as (count, sum, sum of
// squares), so a channel with a large mean does not lose its variance to cancellation; the merge runs in rank
// order on every rank, so all ranks get bit-identical statistics.
SyncBatchNormResult sync_batch_norm_train(const Tensor& input_in, const Tensor& weight, const Tensor& bias, double eps,
                                          const ProcessGroup& group) {
  const Tensor input = input_in.contiguous();
  const char* op = "sync_batch_norm_train";
  const Layout l = check_input(input, weight, bias, op);
  const std::size_t channels = static_cast<std::size_t>(l.c);
  Doubles mean(channels), m2(channels);
  {
    const std::string label = part(l, "fwd local moments");
    detail::CommSpan span(label, detail::SpanKind::Local);
    dispatch(input.dtype(), [&](auto tag) { local_moments(input.data<decltype(tag)>(), l, mean, m2); });
  }

  // Note: [count, dtype, mean[C], M2[C]] in one collective. The dtype rides along so that ranks mixing float32
  // and float64 fail here even when the group's shape check is off (SyncBatchNorm turns it off after its
  // first step: the buffer's length, 2C + 2, is then known to agree, and the check would cost a second
  // collective, i.e. a second wait for the slowest rank, per layer and step).
  constexpr std::size_t kHeader = 2;
  Doubles packed{static_cast<double>(l.per_channel()), static_cast<double>(input.dtype())};
  packed.insert(packed.end(), mean.begin(), mean.end());
  packed.insert(packed.end(), m2.begin(), m2.end());
  const detail::CommLabel forward_label(part(l, "fwd"));
  const auto gathered = group.allgather(from_vector(packed, {static_cast<std::int64_t>(packed.size())},
                                                    TensorOptions{}.with_dtype(DType::Float64)));
  for (std::size_t r = 0; r < gathered.size(); ++r)
    if (gathered[r].data<double>()[1] != packed[1])
      fail("{}: every rank must pass the same dtype, got {} on rank {} and {} on rank {}", op,
           dtype_name(static_cast<DType>(gathered[r].data<double>()[1])), r, dtype_name(input.dtype()),
           group.rank());
  double count = 0;
  auto global_mean = std::make_shared<Doubles>(channels, 0.0);
  Doubles global_m2(channels, 0.0);
  for (const Tensor& part : gathered) {
    const double* p = part.data<double>();
    const double nb = p[0];
    if (nb == 0) continue;
    const double n = count + nb;
    for (std::size_t c = 0; c < channels; ++c) {
      const double delta = p[kHeader + c] - (*global_mean)[c];
      (*global_mean)[c] += delta * nb / n;
      global_m2[c] += p[kHeader + channels + c] + delta * delta * count * nb / n;
    }
    count = n;
  }
  if (count <= 1)
    fail("Expected more than 1 value per channel when training, got input size {} on this rank and {} values "
         "per channel over all {} ranks", shape_string(input.shape()), count, group.world_size());

  auto invstd = std::make_shared<Doubles>(channels);
  Doubles biased(channels), unbiased(channels), scale(channels);
  const Doubles w = channel_values(weight, l.c, 1.0), b = channel_values(bias, l.c, 0.0);
  for (std::size_t c = 0; c < channels; ++c) {
    biased[c] = global_m2[c] / count;
    unbiased[c] = global_m2[c] / (count - 1.0);
    (*invstd)[c] = 1.0 / std::sqrt(biased[c] + eps);
    scale[c] = (*invstd)[c] * w[c];
  }
  Tensor out = empty(input.shape(), input.dtype());
  {
    const std::string label = part(l, "fwd normalize");
    detail::CommSpan span(label, detail::SpanKind::Local);
    dispatch(input.dtype(), [&](auto tag) {
      using T = decltype(tag);
      normalize(input.data<T>(), l, *global_mean, scale, b, out.data<T>());
    });
  }

  SyncBatchNormResult result;
  result.mean = channel_tensor(*global_mean, input.dtype());
  result.var = channel_tensor(biased, input.dtype());
  result.unbiased_var = channel_tensor(unbiased, input.dtype());
  result.global_count = static_cast<std::int64_t>(count);

  const bool has_weight = weight.defined(), has_bias = bias.defined();
  std::vector<Tensor> inputs{input};
  if (has_weight) inputs.push_back(weight);
  if (has_bias) inputs.push_back(bias);
  result.output = record_if_needed(op, out, inputs, [&] {
    return [sx = SavedTensor(input, op), sw = SavedTensor(weight, op), global_mean, invstd, count, l, has_weight,
            has_bias, group](const Tensor& g, NeedsGrad needs) {
      if (is_grad_enabled())
        fail("sync_batch_norm_train: double backward (create_graph) is not supported; use BatchNorm on one process");
      const Tensor& x = sx.get();
      const Doubles wv = channel_values(has_weight ? sw.get() : Tensor(), l.c, 1.0);
      const std::size_t channels = static_cast<std::size_t>(l.c);
      // Note: [local sum(g) | local sum(g * (x - mean))]; the copy of it that is allreduced gives dx the global
      // sums, while dweight and dbias stay this rank's own share (DistributedDataParallel then averages them,
      // exactly as for every other parameter).
      Tensor local = empty({2 * l.c}, DType::Float64);
      double* sums = local.data<double>();
      {
        const std::string label = part(l, "bwd grad sums");
        detail::CommSpan span(label, detail::SpanKind::Local);
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          local_grad_sums(g.data<T>(), x.data<T>(), l, *global_mean, sums, sums + channels);
        });
      }
      Tensor global = local.clone();
      {
        const detail::CommLabel backward_label(part(l, "bwd"));
        group.allreduce(global);
      }
      std::vector<Tensor> grads;
      if (needs[0]) {
        const std::string label = part(l, "bwd dx");
        detail::CommSpan span(label, detail::SpanKind::Local);
        Tensor dx = empty(x.shape(), x.dtype());
        const double* total = global.data<double>();
        dispatch(x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          grad_input(g.data<T>(), x.data<T>(), l, wv, *global_mean, *invstd, total, total + channels, count,
                     dx.data<T>());
        });
        grads.push_back(dx);
      } else {
        grads.emplace_back();
      }
      if (has_weight) {
        Doubles dw(channels);
        for (std::size_t c = 0; c < channels; ++c) dw[c] = sums[channels + c] * (*invstd)[c];
        grads.push_back(needs[1] ? channel_tensor(dw, x.dtype()) : Tensor());
      }
      if (has_bias)
        grads.push_back(needs[grads.size()] ? channel_tensor(Doubles(sums, sums + channels), x.dtype()) : Tensor());
      return grads;
    };
  });
  return result;
}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNormOptions& options, ProcessGroup group)
    : nn::BatchNormBase("SyncBatchNorm", options), group_(std::move(group)), unchecked_group_(group_) {
  unchecked_group_.set_check_shapes(false);
}

void SyncBatchNorm::check_rank(const Tensor& input) const {
  if (input.dim() < 2 || input.dim() > 5)
    fail("SyncBatchNorm: expected input [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W], got {}",
         shape_string(input.shape()));
}

Tensor SyncBatchNorm::forward(const Tensor& input) {
  const auto& opts = options();
  if (!is_training() && opts.track_running_stats) return nn::BatchNormBase::forward(input);
  input.check_defined("SyncBatchNorm");
  check_rank(input);
  if (input.size(1) != opts.num_features)
    fail("SyncBatchNorm: expected {} channels, got input {}", opts.num_features, shape_string(input.shape()));
  // Note: the first training step checks (through the group) that every rank's statistics buffers agree in
  // length, i.e. in C; C is this layer's num_features, checked above on every call, so later steps skip the
  // check's extra collective per call.
  SyncBatchNormResult result =
      sync_batch_norm_train(input, weight, bias, opts.eps, layouts_checked_ ? unchecked_group_ : group_);
  layouts_checked_ = true;
  if (is_training() && opts.track_running_stats) {
    // Note: BatchNorm's rule with the global statistics, outside the graph.
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
    const double factor = opts.momentum ? *opts.momentum : 1.0 / static_cast<double>(num_batches_tracked.item());
    running_mean.mul_(1.0 - factor).add_(result.mean, factor);
    running_var.mul_(1.0 - factor).add_(result.unbiased_var, factor);
  }
  return result.output;
}

std::shared_ptr<nn::Module> SyncBatchNorm::clone() const {
  return clone_into(std::make_shared<SyncBatchNorm>(options(), group_));
}

int convert_sync_batchnorm(nn::Module& model, const ProcessGroup& group) {
  int replaced = 0;
  auto* sequential = dynamic_cast<nn::Sequential*>(&model);
  for (const auto& [name, child] : model.named_children()) {
    auto batch_norm = std::dynamic_pointer_cast<nn::BatchNormBase>(child);
    if (!batch_norm || std::dynamic_pointer_cast<SyncBatchNorm>(child)) {
      replaced += convert_sync_batchnorm(*child, group);
      continue;
    }
    auto sync = std::make_shared<SyncBatchNorm>(batch_norm->options(), group);
    const Tensor& reference = batch_norm->weight.defined() ? batch_norm->weight : batch_norm->running_mean;
    if (reference.defined()) sync->to(reference.dtype());
    sync->load_state(batch_norm->state());
    sync->train(batch_norm->is_training());
    if (sequential)
      sequential->replace(static_cast<std::size_t>(std::stoul(name)), sync);
    else
      model.replace_module(name, sync);
    ++replaced;
  }
  return replaced;
}

}  // namespace tapegrad::distributed
