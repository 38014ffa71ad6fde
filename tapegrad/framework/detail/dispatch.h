#pragma once
// Internal: runtime dtype -> compile-time element type.
#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/dtype.h>
#include <tapegrad/framework/error.h>

#include <utility>

namespace tapegrad::detail {

/// Calls f(T{}) with T = float or double; int64 is an error naming `op`.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: break;
  }
  if (dtype == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", op);
  fail("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(dtype));
}

/// Calls f(T{}) with T = float, double or std::int64_t; bfloat16 is an error (an op that only moves elements
/// dispatches on element_size instead, and works on bfloat16 too).
template <class F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: break;
    case DType::BFloat16: fail("bfloat16 is not supported by this op: convert with .to(DType::Float32)");
  }
  return f(std::int64_t{});
}

/// Calls f(T{}) with T = float, double, std::int64_t or BFloat16: for code that only copies elements (views made
/// contiguous, gathers, concatenation), where a bfloat16 is 2 bytes like any other.
template <class F>
decltype(auto) dispatch_moves(DType dtype, F&& f) {
  if (dtype == DType::BFloat16) return f(BFloat16{});
  return dispatch_all(dtype, std::forward<F>(f));
}

}  // namespace tapegrad::detail
