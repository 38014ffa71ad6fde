// SyncBatchNorm: the global-statistics training op (forward and backward side by side), the layer, and the
// in-place conversion of a model's BatchNorm layers.
#include <tapegrad/framework/distributed/sync_batch_norm.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/distributed/detail/comm_profile.h>
#include <tapegrad/framework/kernels/dispatch.h>
#include <tapegrad/layers/sequential.h>

namespace tapegrad::distributed {

namespace {

using Doubles = std::vector<double>;

// The input viewed as [N, C, S].
struct Layout {
  std::int64_t n = 0, c = 0, s = 1;
  std::int64_t per_channel() const { return n * s; }
};

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

// Whether the per-channel loops run across the OpenMP threads (detail::use_threads: not for a small batch, one
// thread, or inside a region).
bool threaded(const Layout& l) { return tapegrad::detail::use_threads(l.n * l.c * l.s, 32768); }

// One channel's values on this rank: n runs of s contiguous values, `stride` apart (C * S), from `p`.
struct Runs {
  std::int64_t n, s, stride;
};
Runs runs_of(const Layout& l) { return {l.n, l.s, l.c * l.s}; }

// The per-channel loops, each compiled for AVX-512, AVX2 and the baseline and chosen at load time
// (kernels/dispatch.h), as BatchNorm's own (kernels/batch_norm_runs.cpp): its kernels are internal to
// libtapegrad, so these are the same loop bodies (same arithmetic, same rounding: this library is built without
// FMA contraction too), over all runs of one channel per call. Before, plain `omp simd` loops at the x86-64-v2
// baseline made a SyncBatchNorm+ReLU step 3.1x BatchNorm+ReLU's CPU time on [64, 32, 28, 28].
// Note: sums in double, whatever T; `omp simd` splits them over the vector lanes.
template <class T>
[[gnu::always_inline]] inline void moments_body(const T* p, Runs r, double shift, double& sum_out,
                                                double& squares_out) {
  double sum = 0, squares = 0;
  for (std::int64_t k = 0; k < r.n; ++k, p += r.stride) {
#pragma omp simd reduction(+ : sum, squares)
    for (std::int64_t i = 0; i < r.s; ++i) {
      const double d = static_cast<double>(p[i]) - shift;
      sum += d;
      squares += d * d;
    }
  }
  sum_out += sum;
  squares_out += squares;
}

template <class T>
[[gnu::always_inline]] inline void affine_body(const T* p, T* q, Runs r, T shift, T scale, T offset) {
  for (std::int64_t k = 0; k < r.n; ++k, p += r.stride, q += r.stride) {
#pragma omp simd
    for (std::int64_t i = 0; i < r.s; ++i) q[i] = (p[i] - shift) * scale + offset;
  }
}

template <class T>
[[gnu::always_inline]] inline void grad_sums_body(const T* g, const T* x, Runs r, double mean, double& sum_g,
                                                  double& sum_gxc) {
  double a = 0, b = 0;
  for (std::int64_t k = 0; k < r.n; ++k, g += r.stride, x += r.stride) {
#pragma omp simd reduction(+ : a, b)
    for (std::int64_t i = 0; i < r.s; ++i) {
      const double gv = static_cast<double>(g[i]);
      a += gv;
      b += gv * (static_cast<double>(x[i]) - mean);
    }
  }
  sum_g += a;
  sum_gxc += b;
}

template <class T>
[[gnu::always_inline]] inline void grad_input_body(const T* g, const T* x, T* dx, Runs r, T mean, T ka, T kb, T kd) {
  for (std::int64_t k = 0; k < r.n; ++k, g += r.stride, x += r.stride, dx += r.stride) {
#pragma omp simd
    for (std::int64_t i = 0; i < r.s; ++i) dx[i] = ka * g[i] + kb * (x[i] - mean) + kd;
  }
}

}  // namespace

// Note: outside the anonymous namespace: target_clones makes an ifunc, which GCC needs to be able to name.
namespace sync_batch_norm_kernels {

TAPEGRAD_DISPATCH void channel_moments(const float* p, Runs r, double shift, double& sum, double& squares) {
  moments_body(p, r, shift, sum, squares);
}
TAPEGRAD_DISPATCH void channel_moments(const double* p, Runs r, double shift, double& sum, double& squares) {
  moments_body(p, r, shift, sum, squares);
}
TAPEGRAD_DISPATCH void channel_affine(const float* p, float* q, Runs r, float shift, float scale, float offset) {
  affine_body(p, q, r, shift, scale, offset);
}
TAPEGRAD_DISPATCH void channel_affine(const double* p, double* q, Runs r, double shift, double scale, double offset) {
  affine_body(p, q, r, shift, scale, offset);
}
TAPEGRAD_DISPATCH void channel_grad_sums(const float* g, const float* x, Runs r, double mean, double& sum_g,
                                         double& sum_gxc) {
  grad_sums_body(g, x, r, mean, sum_g, sum_gxc);
}
TAPEGRAD_DISPATCH void channel_grad_sums(const double* g, const double* x, Runs r, double mean, double& sum_g,
                                         double& sum_gxc) {
  grad_sums_body(g, x, r, mean, sum_g, sum_gxc);
}
TAPEGRAD_DISPATCH void channel_grad_input(const float* g, const float* x, float* dx, Runs r, float mean, float ka,
                                          float kb, float kd) {
  grad_input_body(g, x, dx, r, mean, ka, kb, kd);
}
TAPEGRAD_DISPATCH void channel_grad_input(const double* g, const double* x, double* dx, Runs r, double mean,
                                          double ka, double kb, double kd) {
  grad_input_body(g, x, dx, r, mean, ka, kb, kd);
}

}  // namespace sync_batch_norm_kernels

namespace {

using namespace sync_batch_norm_kernels;

// Note: a tensor that fits the last-level cache with room to spare is visited in memory order (all channels
// of sample 0, then of sample 1, ...), BatchNorm's rule (kernels/batch_norm_passes.cpp): one sequential stream
// that the hardware prefetcher follows, instead of N short runs per channel, and the elementwise pass after a
// reduction finds the data in cache. Per-channel sums still add the runs in sample order (each thread its own
// samples, the threads' partial sums merged in thread order), so both orders give the same sums.
constexpr std::int64_t kSweepMaxBytes = 16 << 20;

template <class T>
bool use_sweep(const Layout& l) {
  return l.s > 1 && l.n > 1 && l.n * l.c * l.s * static_cast<std::int64_t>(sizeof(T)) <= kSweepMaxBytes;
}

// Calls run(thread, c, offset of the run) for every (sample, channel) run in memory order, the samples split
// over `threads` threads.
template <class Run>
void sweep(const Layout& l, int threads, Run run) {
  const auto part = [&](int t) {
    const std::int64_t first = l.n * t / threads, last = l.n * (t + 1) / threads;
    for (std::int64_t n = first; n < last; ++n)
      for (std::int64_t c = 0; c < l.c; ++c) run(t, c, (n * l.c + c) * l.s);
  };
  if (threads < 2) return part(0);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) part(t);
}

int sweep_threads(const Layout& l) {
  return threaded(l) ? static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), l.n)) : 1;
}

// Per-channel sums of two quantities, `add(c, offset, runs, sum1, sum2)` adding those of `runs` from `offset`:
// run by run in memory order with per-thread partial sums merged in thread order, or a whole channel at once.
template <class T, class Add>
void channel_sums(const Layout& l, double* first, double* second, Add add) {
  const std::size_t channels = static_cast<std::size_t>(l.c);
  if (!use_sweep<T>(l)) {
    tapegrad::detail::parallel_for(l.c, threaded(l), [&](std::int64_t c) {
      first[c] = second[c] = 0;
      add(c, c * l.s, runs_of(l), first[c], second[c]);
    });
    return;
  }
  const int threads = sweep_threads(l);
  const Runs one{1, l.s, 0};
  std::vector<Doubles> partial(static_cast<std::size_t>(2 * threads), Doubles(channels, 0.0));
  sweep(l, threads, [&](int t, std::int64_t c, std::int64_t at) {
    add(c, at, one, partial[static_cast<std::size_t>(2 * t)][static_cast<std::size_t>(c)],
        partial[static_cast<std::size_t>(2 * t + 1)][static_cast<std::size_t>(c)]);
  });
  for (std::size_t c = 0; c < channels; ++c) {
    double a = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      a += partial[static_cast<std::size_t>(2 * t)][c];
      b += partial[static_cast<std::size_t>(2 * t + 1)][c];
    }
    first[c] = a;
    second[c] = b;
  }
}

// Calls map(c, offset, values) for every run (all of a channel's runs at once in channel order).
template <class T, class Map>
void channel_map(const Layout& l, Map map) {
  if (!use_sweep<T>(l)) {
    tapegrad::detail::parallel_for(l.c, threaded(l), [&](std::int64_t c) { map(c, c * l.s, runs_of(l)); });
    return;
  }
  const Runs one{1, l.s, 0};
  sweep(l, sweep_threads(l), [&](int, std::int64_t c, std::int64_t at) { map(c, at, one); });
}

// This rank's per-channel mean and sum of squared deviations, in one pass and in double.
// Note: the sums are of d = x - x0, x0 the channel's first value on this rank (the shifted-data algorithm of
// BatchNorm's own kernel), so a large mean cancels nothing.
template <class T>
void local_moments(const T* x, const Layout& l, Doubles& mean, Doubles& m2) {
  const double count = static_cast<double>(l.per_channel());
  Doubles shift(static_cast<std::size_t>(l.c), 0.0), sum(shift.size()), squares(shift.size());
  if (count > 0)
    for (std::int64_t c = 0; c < l.c; ++c) shift[static_cast<std::size_t>(c)] = static_cast<double>(x[c * l.s]);
  channel_sums<T>(l, sum.data(), squares.data(), [&](std::int64_t c, std::int64_t at, Runs r, double& a, double& b) {
    channel_moments(x + at, r, shift[static_cast<std::size_t>(c)], a, b);
  });
  for (std::size_t c = 0; c < shift.size(); ++c) {
    mean[c] = count > 0 ? shift[c] + sum[c] / count : 0.0;
    m2[c] = count > 0 ? std::max(0.0, squares[c] - sum[c] * sum[c] / count) : 0.0;
  }
}

// out = (x - mean) * scale + offset per channel.
template <class T>
void normalize(const T* x, const Layout& l, const Doubles& mean, const Doubles& scale, const Doubles& offset, T* out) {
  std::vector<T> m(mean.begin(), mean.end()), k(scale.begin(), scale.end()), b(offset.begin(), offset.end());
  channel_map<T>(l, [&](std::int64_t c, std::int64_t at, Runs r) {
    const auto i = static_cast<std::size_t>(c);
    channel_affine(x + at, out + at, r, m[i], k[i], b[i]);
  });
}

// This rank's per-channel sum(g) and sum(g * (x - mean)).
template <class T>
void local_grad_sums(const T* g, const T* x, const Layout& l, const Doubles& mean, double* sum_g, double* sum_gxc) {
  channel_sums<T>(l, sum_g, sum_gxc, [&](std::int64_t c, std::int64_t at, Runs r, double& a, double& b) {
    channel_grad_sums(g + at, x + at, r, mean[static_cast<std::size_t>(c)], a, b);
  });
}

// dx = weight * invstd * (g - sum_g / count - (x - mean) * invstd^2 * sum_gxc / count), global sums and count.
template <class T>
void grad_input(const T* g, const T* x, const Layout& l, const Doubles& weight, const Doubles& mean,
                const Doubles& invstd, const double* sum_g, const double* sum_gxc, double count, T* dx) {
  const std::size_t channels = static_cast<std::size_t>(l.c);
  std::vector<T> ka(channels), m(channels), kb(channels), kd(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double a = weight[c] * invstd[c];
    ka[c] = static_cast<T>(a);
    m[c] = static_cast<T>(mean[c]);
    kb[c] = static_cast<T>(-a * invstd[c] * invstd[c] * sum_gxc[c] / count);
    kd[c] = static_cast<T>(-a * sum_g[c] / count);
  }
  channel_map<T>(l, [&](std::int64_t c, std::int64_t at, Runs r) {
    const auto i = static_cast<std::size_t>(c);
    channel_grad_input(g + at, x + at, dx + at, r, m[i], ka[i], kb[i], kd[i]);
  });
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
