#pragma once
/// Element types a Tensor can hold, and the compile-time mapping to C++ types.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <string_view>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// The runtime element type of a tensor. Int64 is for labels, indices and counters: it never requires grad.
enum class DType : std::uint8_t { Float32 = 0, Float64 = 1, Int64 = 2 };

/// "float32", "float64" or "int64".
std::string_view dtype_name(DType dtype);
/// Bytes per element.
std::size_t element_size(DType dtype);
/// True for Float32 and Float64.
inline bool is_floating(DType dtype) { return dtype != DType::Int64; }

/// The DType of a C++ element type.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::Int64; }

}  // namespace tapegrad

TAPEGRAD_API_END
