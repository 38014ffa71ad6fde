#pragma once
// Internal: a typed elementwise map producing a new tensor of the same shape and dtype.
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// body(i) for i in [0, n): one elementwise pass, vectorised, across the threads when long (kElementwiseParallel).
template <class Body>
void elementwise_for(std::int64_t n, Body body) {
  if (use_threads(n, kElementwiseParallel)) {
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) body(i);
  } else {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) body(i);
  }
}

/// out[i] = f(x[i]) for float32/float64 tensors; `op` names the op in the dtype error.
/// Note: a channels-last x is mapped as its dense NHWC buffer and gives a channels-last result (the order of a
/// map does not matter), as PyTorch's unary ops keep the format.
template <class F>
Tensor map_floating(const Tensor& x_in, const char* op, F f) {
  x_in.check_defined(op);
  const MemoryFormat format = dense_format(x_in);
  Tensor copy;  // only for a strided view; a contiguous or channels-last input is read where it lies
  const Tensor& x = x_in.is_contiguous(format) ? x_in : (copy = contiguous_values(x_in));
  Tensor out = empty(x.shape(), x.dtype(), format);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>(format);
    T* o = out.data<T>(format);
    elementwise_for(x.numel(), [&](std::int64_t i) { o[i] = f(in[i]); });
  });
  return out;
}

}  // namespace tapegrad::detail
