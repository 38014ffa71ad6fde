#pragma once
/// bfloat16: the upper 16 bits of an IEEE binary32 (1 sign, 8 exponent, 7 mantissa bits), float32's range at
/// 8 bits of precision, and its scalar conversions to and from float.
#include <tapegrad/export.h>
#include <tapegrad/framework/dtype.h>
#include <bit>
#include <cstdint>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// One bfloat16 value, by its bits (as c10::BFloat16's `x`): the element type of a DType::BFloat16 tensor.
/// Note: no arithmetic operators on purpose: tapegrad computes in float and rounds once (bfloat16_from_float).
struct BFloat16 {
  std::uint16_t bits;
};

template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }

/// float -> bfloat16, rounded to nearest, ties to even (the rounding of torch's `.to(torch.bfloat16)`); subnormals
/// are rounded like any other value (no flush to zero), +-inf and +-0 are kept. A NaN stays a quiet NaN with its
/// sign and the top of its payload: (bits >> 16) | 0x0040, as the AVX512-BF16 instruction vcvtneps2bf16 gives.
/// Note: torch 1.13 itself is not consistent on NaN bits (its vectorised conversion gives 0xffff, its scalar
/// c10::BFloat16 0x7fc0); every NaN stays a NaN in all three.
constexpr BFloat16 bfloat16_from_float(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};
  // Note: adding 0x7fff plus the kept part's lowest bit rounds the dropped 16 bits to nearest, ties to even; a
  // carry into the exponent is correct rounding too (up to inf for values above bfloat16's largest finite).
  const std::uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<std::uint16_t>((bits + rounding_bias) >> 16)};
}

/// bfloat16 -> float, exact (every bfloat16 is a float).
constexpr float bfloat16_to_float(BFloat16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

}  // namespace tapegrad

TAPEGRAD_API_END
