#pragma once
// Internal: runtime dtype -> compile-time element type.
#include <tapegrad/framework/dtype.h>
#include <tapegrad/framework/error.h>

namespace tapegrad::detail {

/// Calls f(T{}) with T = float or double; int64 is an error naming `op`.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: break;
  }
  fail("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(dtype));
}

/// Calls f(T{}) with T = float, double or std::int64_t.
template <class F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: break;
  }
  return f(std::int64_t{});
}

}  // namespace tapegrad::detail
