#pragma once
// Internal: the backward of a unary op, g * f'(x), with a fused first-order path and a recorded one.
// In ops/, not framework/detail/: the recorded path is built from ops (mul), which sit above detail/.
#include <cstdint>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/unary.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// out[i] = combine(g[i], saved[i]) in one pass, split across threads when long: the fused first-order
/// backward of a unary op. `g` and `saved` have the same shape and dtype.
/// Note: the gradient takes the layout of `saved` (a channels-last activation gets a channels-last gradient, as
/// in PyTorch); a g in the other layout is converted first.
template <class Combine>
Tensor fused_backward(const Tensor& g_in, const Tensor& saved_in, const char* op, Combine combine) {
  const MemoryFormat format = dense_format(saved_in);
  const Tensor g = values_in_format(g_in, format), saved = values_in_format(saved_in, format);
  Tensor out = empty(g.shape(), g.dtype(), format);
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pg = g.data<T>(format);
    const T* ps = saved.data<T>(format);
    T* o = out.data<T>(format);
    elementwise_for(g.numel(), [&](std::int64_t i) { o[i] = combine(pg[i], ps[i]); });
  });
  return out;
}

/// g * d(saved): `derivative` maps each element of `saved` (the op's input or its output values) to the
/// local derivative.
template <class F>
Tensor times_local_derivative(const Tensor& g, const Tensor& saved, const char* op, F derivative) {
  return fused_backward(g, saved, op, [&derivative](auto gi, auto si) { return gi * derivative(si); });
}

/// keep(saved) ? g : 0: the backward of a piecewise-identity op such as relu, where a product g * 0/1 would
/// turn an infinite g into NaN.
template <class Keep>
Tensor keep_gradient_where(const Tensor& g, const Tensor& saved, const char* op, Keep keep) {
  return fused_backward(g, saved, op, [&keep](auto gi, auto si) { return keep(si) ? gi : decltype(gi)(0); });
}

/// The backward of a unary op. Note: outside create_graph (grad mode off) the fused kernel runs; under
/// create_graph `composed()` builds f'(x) from recorded tapegrad ops, so the gradient is itself
/// differentiable. Tests check that both paths give the same numbers.
template <class F, class Composed>
Tensor unary_backward(const Tensor& g, const Tensor& saved, const char* op, F derivative, Composed composed) {
  if (!is_grad_enabled()) return times_local_derivative(g, saved, op, derivative);
  return mul(g, composed());
}

}  // namespace tapegrad::detail
