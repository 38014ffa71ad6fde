// Fused BatchNorm, the two ops: their checks, their tape records, and each backward beside its forward
// (fused without create_graph, composed from tapegrad ops with it). The passes over the data, their visiting
// order and threads are framework/kernels/batch_norm_passes.cpp.
// Channels-last: an [N, C, H, W] input that suggests channels-last is, in memory, an [N*H*W, C] matrix with C
// innermost, so the kernels see it as BatchNorm1d's [N*H*W, C] (their row versions, vectorised over channels);
// the output and the input gradient are channels-last (PyTorch's), and the statistics are the same per-channel
// sums taken in another order (equal within float rounding, not bit-for-bit).
#include <tapegrad/framework/ops/batch_norm.h>

#include <cmath>
#include <memory>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/kernels/batch_norm_passes.h>
#include <tapegrad/framework/kernels/batch_norm_runs.h>
#include <tapegrad/framework/memory_format.h>
#include <tapegrad/framework/ops/detail/batch_norm_relu.h>
#include <tapegrad/framework/ops/detail/relu_backward.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

using Layout = kernels::BatchNormLayout;
using Doubles = std::vector<double>;

Layout check_input(const Tensor& x, const char* op) {
  x.check_defined(op);
  if (x.dim() < 2 || x.dim() > 4)
    fail("{}: expected input [N, C], [N, C, L] or [N, C, H, W], got {}", op, shape_string(x.shape()));
  if (!is_floating(x.dtype())) fail("{}: expected a float32 or float64 input, got {}", op, dtype_name(x.dtype()));
  Layout layout{x.size(0), x.size(1), 1};
  for (std::int64_t d = 2; d < x.dim(); ++d) layout.s *= x.size(d);
  return layout;
}

void check_channel_vector(const Tensor& t, const char* name, const Tensor& x, const char* op) {
  if (!t.defined()) return;
  if (t.shape() != Shape{x.size(1)})
    fail("{}: {} must have shape [{}] for input {}, got {}", op, name, x.size(1), shape_string(x.shape()),
         shape_string(t.shape()));
  if (t.dtype() != x.dtype())
    fail("{}: {} is {} but the input is {}", op, name, dtype_name(t.dtype()), dtype_name(x.dtype()));
}

// The format BatchNorm runs in: channels-last when the input suggests it (PyTorch's batch_norm keeps the input's
// suggested format), else row-major.
MemoryFormat input_format(const Tensor& x) { return x.suggest_memory_format(); }

// The kernels' view of an input in `format`: channels-last [N, C, H, W] is [N*H*W, C] in memory.
Layout kernel_layout(const Layout& l, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? Layout{l.n * l.s, l.c, 1} : l;
}

// Per-channel values of an optional [C] tensor as double (`fallback` when undefined).
Doubles channel_values(const Tensor& t, std::int64_t channels, double fallback) {
  if (!t.defined()) return Doubles(static_cast<std::size_t>(channels), fallback);
  return t.to_vector();
}

Tensor channel_tensor(const Doubles& values, DType dtype) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())}, TensorOptions{}.with_dtype(dtype));
}

// ---- the composed (differentiable) backward used under create_graph ----

std::vector<std::int64_t> reduce_dims(const Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

Shape channel_shape(const Tensor& x) {
  Shape s(static_cast<std::size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// Note: the statistics are recomputed from x with tapegrad ops, so the result is differentiable in x, weight
// and g. 1/sqrt(v) is written exp(-0.5 log v) (v = var + eps > 0) to need only the core elementwise ops.
std::vector<Tensor> composed_train_backward(const Tensor& g, const Tensor& x, const Tensor& weight, double eps,
                                            NeedsGrad needs, bool has_weight, bool has_bias) {
  const auto dims = reduce_dims(x);
  const Tensor centered = x - mean(x, dims, true);
  const Tensor invstd = exp(mul(log(add(mean(centered * centered, dims, true), eps)), -0.5));
  const Tensor xhat = centered * invstd;
  std::vector<Tensor> out;
  if (needs[0]) {
    const Tensor gw = has_weight ? g * weight.reshape(channel_shape(x)) : g;
    out.push_back(invstd * (gw - mean(gw, dims, true) - xhat * mean(gw * xhat, dims, true)));
  } else {
    out.emplace_back();
  }
  if (has_weight) out.push_back(needs[1] ? sum(g * xhat, dims) : Tensor());
  if (has_bias) out.push_back(needs[out.size()] ? sum(g, dims) : Tensor());
  return out;
}

std::vector<Tensor> composed_eval_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Doubles& mean,
                                           const Doubles& invstd, NeedsGrad needs, bool has_weight, bool has_bias) {
  const auto dims = reduce_dims(x);
  const Shape cs = channel_shape(x);
  const Tensor m = channel_tensor(mean, x.dtype()).reshape(cs);
  const Tensor inv = channel_tensor(invstd, x.dtype()).reshape(cs);
  std::vector<Tensor> out;
  if (needs[0])
    out.push_back(has_weight ? g * (weight.reshape(cs) * inv) : g * inv);
  else
    out.emplace_back();
  if (has_weight) out.push_back(needs[1] ? sum(g * ((x - m) * inv), dims) : Tensor());
  if (has_bias) out.push_back(needs[out.size()] ? sum(g, dims) : Tensor());
  return out;
}

std::vector<Tensor> differentiable_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  return inputs;
}

// ReLU's input in a fused BatchNorm+ReLU forward, recomputed from x for ReLU's backward rule: the forward's
// per-channel coefficients through the same affine kernel (rounding every operation once), so the same bits.
// Note: recomputing instead of saving the output keeps one tensor fewer alive until backward, and leaves the
// output free to be modified in place.
// `l` is the kernels' layout of x in `format`.
Tensor relu_input(const Tensor& x, const Layout& l, MemoryFormat format, const Doubles& shift, const Doubles& scale,
                  const Doubles& offset) {
  Tensor y = empty(x.shape(), x.dtype(), format);
  detail::dispatch_floating(x.dtype(), "batch_norm_relu backward", [&](auto tag) {
    using T = decltype(tag);
    kernels::batch_norm_affine(x.data<T>(format), l, shift, scale, offset, y.data<T>(format));
  });
  return y;
}

Doubles times(const Doubles& a, const Doubles& b) {
  Doubles out(a.size());
  for (std::size_t c = 0; c < out.size(); ++c) out[c] = a[c] * b[c];
  return out;
}

// Raw gradients of weight and bias from the per-channel sums, appended in input order.
void append_affine_grads(std::vector<Tensor>& out, NeedsGrad needs, bool has_weight, bool has_bias,
                         const Doubles& sum_g, const Doubles& sum_gxc, const Doubles& invstd, DType dtype) {
  if (has_weight) {
    if (needs[1]) {
      Doubles dw(sum_gxc.size());
      for (std::size_t c = 0; c < dw.size(); ++c) dw[c] = sum_gxc[c] * invstd[c];
      out.push_back(channel_tensor(dw, dtype));
    } else {
      out.emplace_back();
    }
  }
  if (has_bias) out.push_back(needs[out.size()] ? channel_tensor(sum_g, dtype) : Tensor());
}

BatchNormTrainResult train_forward(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, double eps,
                                   bool relu) {
  const char* op = relu ? "batch_norm_train_relu" : "batch_norm_train";
  check_input(input_in, op);
  const MemoryFormat format = input_format(input_in);
  const Tensor input = input_in.contiguous(format), weight = weight_in.contiguous(), bias = bias_in.contiguous();
  const Layout l = kernel_layout(check_input(input, op), format);
  check_channel_vector(weight, "weight", input, op);
  check_channel_vector(bias, "bias", input, op);
  if (l.per_channel() == 1)
    fail("Expected more than 1 value per channel when training, got input size {}", shape_string(input.shape()));
  if (l.per_channel() == 0) fail("{}: input {} has no values per channel", op, shape_string(input.shape()));

  const std::size_t channels = static_cast<std::size_t>(l.c);
  const Doubles w = channel_values(weight, l.c, 1.0), b = channel_values(bias, l.c, 0.0);
  auto mean = std::make_shared<Doubles>(channels);
  auto invstd = std::make_shared<Doubles>(channels);
  Doubles var_sum(channels);
  Tensor out = empty(input.shape(), input.dtype(), format);
  detail::dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::batch_norm_train_forward(input.data<T>(format), l, w, b, eps, out.data<T>(format), *mean, var_sum,
                                      *invstd, relu);
  });

  Doubles biased(channels), unbiased(channels);
  const double count = static_cast<double>(l.per_channel());
  for (std::size_t c = 0; c < channels; ++c) {
    biased[c] = var_sum[c] / count;
    unbiased[c] = var_sum[c] / (count - 1.0);
  }
  BatchNormTrainResult result;
  result.mean = channel_tensor(*mean, input.dtype());
  result.var = channel_tensor(biased, input.dtype());
  result.unbiased_var = channel_tensor(unbiased, input.dtype());

  const bool has_weight = weight.defined(), has_bias = bias.defined();
  // With a fused ReLU: the bias values, to recompute ReLU's input in the backward.
  const auto relu_bias = relu ? std::make_shared<const Doubles>(b) : nullptr;
  if (trace::active()) trace::annotate(out, {{"weight", weight_in}, {"bias", bias_in}, {"eps", eps}});
  result.output = record_if_needed(op, out, differentiable_inputs(input, weight, bias), [&] {
    return [sx = SavedTensor(input, op), sw = SavedTensor(weight, op), relu_bias, mean, invstd, eps, l, format,
            has_weight, has_bias](const Tensor& g_in, NeedsGrad needs) {
      const Tensor& x = sx.get();
      const Tensor g_out = g_in.contiguous(format);  // dx takes the input's format whatever the gradient's
      const Tensor weight_now = has_weight ? sw.get() : Tensor();
      const Doubles wv = channel_values(weight_now, l.c, 1.0);
      if (is_grad_enabled()) {
        const Tensor g = relu_bias ? detail::relu_backward(
                                         g_out, relu_input(x, l, format, *mean, times(*invstd, wv), *relu_bias))
                                   : g_out;
        return composed_train_backward(g, x, weight_now, eps, needs, has_weight, has_bias);
      }
      // Note: without create_graph the fused kernel gives dx, dweight and dbias in one sweep (applying a fused
      // ReLU's rule on the way); it is not differentiable itself, which is why the composed path above exists.
      const Tensor& g = g_out;
      const std::size_t channels = static_cast<std::size_t>(l.c);
      Doubles sum_g(channels), sum_gxc(channels);
      Tensor dx = needs[0] ? empty(x.shape(), x.dtype(), format) : Tensor();
      detail::dispatch_floating(x.dtype(), "batch_norm_train backward", [&](auto tag) {
        using T = decltype(tag);
        kernels::batch_norm_train_backward(g.data<T>(format), x.data<T>(format), l, wv, *mean, *invstd,
                                           needs[0] ? dx.data<T>(format) : nullptr, sum_g, sum_gxc, relu_bias.get());
      });
      std::vector<Tensor> grads{dx};
      append_affine_grads(grads, needs, has_weight, has_bias, sum_g, sum_gxc, *invstd, x.dtype());
      return grads;
    };
  });
  return result;
}

Tensor eval_forward(const Tensor& input_in, const Tensor& mean_in, const Tensor& var_in, const Tensor& weight_in,
                    const Tensor& bias_in, double eps, bool relu) {
  const char* op = relu ? "batch_norm_eval_relu" : "batch_norm_eval";
  check_input(input_in, op);
  const MemoryFormat format = input_format(input_in);
  const Tensor input = input_in.contiguous(format), mean = mean_in.contiguous(), var = var_in.contiguous();
  const Tensor weight = weight_in.contiguous(), bias = bias_in.contiguous();
  const Layout l = kernel_layout(check_input(input, op), format);
  mean.check_defined(op);
  var.check_defined(op);
  check_channel_vector(mean, "mean", input, op);
  check_channel_vector(var, "var", input, op);
  check_channel_vector(weight, "weight", input, op);
  check_channel_vector(bias, "bias", input, op);
  if (mean.requires_grad() || var.requires_grad())
    fail("{}: mean and var are treated as constants and must not require grad", op);

  const std::size_t channels = static_cast<std::size_t>(l.c);
  const Doubles b = channel_values(bias, l.c, 0.0), v = var.to_vector();
  const Doubles w = weight.defined() ? weight.to_vector() : Doubles();
  // Note: the statistics are copied now, so a later running-statistics update cannot change this backward.
  auto m = std::make_shared<Doubles>(mean.to_vector());
  auto invstd = std::make_shared<Doubles>(channels);
  auto scale = std::make_shared<Doubles>(channels);
  kernels::eval_coefficients(v.data(), weight.defined() ? w.data() : nullptr, eps, l.c, invstd->data(),
                             scale->data());
  Tensor out = empty(input.shape(), input.dtype(), format);
  detail::dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::batch_norm_affine(input.data<T>(format), l, *m, *scale, b, out.data<T>(format), relu);
  });

  const bool has_weight = weight.defined(), has_bias = bias.defined();
  // With a fused ReLU: the coefficients, to recompute ReLU's input in the backward.
  const auto relu_bias = relu ? std::make_shared<const Doubles>(b) : nullptr;
  if (trace::active())
    trace::annotate(
        out,
        {{"weight", weight_in}, {"bias", bias_in}, {"running_mean", mean_in}, {"running_var", var_in}, {"eps", eps}});
  return record_if_needed(op, out, differentiable_inputs(input, weight, bias), [&] {
    return [sx = SavedTensor(input, op), sw = SavedTensor(weight, op), relu_bias, scale, m, invstd, l, format,
            has_weight, has_bias](const Tensor& g_in, NeedsGrad needs) {
      const Tensor& x = sx.get();
      const Tensor g_out = g_in.contiguous(format);
      const Tensor g =
          relu_bias ? detail::relu_backward(g_out, relu_input(x, l, format, *m, *scale, *relu_bias)).contiguous(format)
                    : g_out;
      const Tensor weight_now = has_weight ? sw.get() : Tensor();
      if (is_grad_enabled()) return composed_eval_backward(g, x, weight_now, *m, *invstd, needs, has_weight, has_bias);
      const std::size_t channels = static_cast<std::size_t>(l.c);
      Doubles sum_g(channels), sum_gxc(channels);
      Tensor dx = needs[0] ? empty(x.shape(), x.dtype(), format) : Tensor();
      detail::dispatch_floating(x.dtype(), "batch_norm_eval backward", [&](auto tag) {
        using T = decltype(tag);
        if (needs[1] || (has_bias && needs[has_weight ? 2 : 1]))
          kernels::batch_norm_grad_sums(g.data<T>(format), x.data<T>(format), l, *m, sum_g, sum_gxc);
        if (needs[0]) {
          // dx = g * weight * invstd: the forward's scale.
          kernels::batch_norm_affine(g.data<T>(format), l, Doubles(channels, 0.0), *scale, Doubles(channels, 0.0),
                                     dx.data<T>(format));
        }
      });
      std::vector<Tensor> grads{dx};
      append_affine_grads(grads, needs, has_weight, has_bias, sum_g, sum_gxc, *invstd, x.dtype());
      return grads;
    };
  });
}

}  // namespace

BatchNormTrainResult batch_norm_train(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  return train_forward(input, weight, bias, eps, false);
}

Tensor batch_norm_eval(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                       const Tensor& bias, double eps) {
  return eval_forward(input, mean, var, weight, bias, eps, false);
}

namespace detail {

BatchNormTrainResult batch_norm_train_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  return train_forward(input, weight, bias, eps, true);
}

Tensor batch_norm_eval_relu(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                            const Tensor& bias, double eps) {
  return eval_forward(input, mean, var, weight, bias, eps, true);
}

}  // namespace detail

}  // namespace tapegrad
