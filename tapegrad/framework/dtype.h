#pragma once
/// Element types a Tensor can hold, and the compile-time mapping to C++ types.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <string_view>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// The runtime element type of a tensor. Int64 is for labels, indices and counters: it never requires grad.
/// BFloat16 (tapegrad/framework/bfloat16.h) is a floating type stored in 2 bytes; most compute ops refuse it
/// (docs/numerics.md).
enum class DType : std::uint8_t { Float32 = 0, Float64 = 1, Int64 = 2, BFloat16 = 3 };

/// "float32", "float64", "int64" or "bfloat16".
std::string_view dtype_name(DType dtype);
/// Bytes per element.
std::size_t element_size(DType dtype);
/// True for Float32, Float64 and BFloat16.
inline bool is_floating(DType dtype) { return dtype != DType::Int64; }

/// The DType of a C++ element type.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::Int64; }

}  // namespace tapegrad

TAPEGRAD_API_END
