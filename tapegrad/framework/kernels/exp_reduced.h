#pragma once
// exp(-a) in float32 by Cody and Waite's reduction and a Taylor polynomial, shared by the dispatched row
// kernels (kernels/vector_math.cpp: sigmoid, tanh, the fused LSTM row; kernels/attention.cpp: softmax rows).
// Every function is always_inline scalar code on plain floats and integers, so each caller's target clone
// (x86-64-v2, AVX2, AVX-512) vectorises it in its own loops; no intrinsics here.
#include <bit>
#include <cstdint>

namespace tapegrad::kernels::exp_reduced {

constexpr float kLog2e = 0x1.715476p+0f;
// ln 2 = kLn2Hi + kLn2Lo with kLn2Hi's 15 significant bits, so that j * kLn2Hi is exact for |j| < 2^9
// (Cody and Waite's reduction, exact enough without an FMA, which the x86-64-v2 baseline lacks).
constexpr float kLn2Hi = 0x1.62e4p-1f;
constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
// Adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer and leaves that integer in the low bits.
constexpr float kShift = 0x1.8p23f;

// expm1(r) for |r| <= ln 2 / 2 (plus rounding slack): Taylor's series to r^7, whose truncation error there is
// below 2e-8 relative, a third of a float ulp; r + r^2 * p keeps full relative accuracy for tiny r.
[[gnu::always_inline]] inline float expm1_reduced(float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  return r + r * r * p;
}

// 2^i for -126 <= i <= 127, built in the exponent field. Note: the shift is done unsigned so that a NaN's
// meaningless i (its result is discarded by the NaN already in the product) is not undefined behaviour.
[[gnu::always_inline]] inline float pow2(std::int32_t i) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(i + 127) << 23);
}

// y = j ln 2 + r with j an integer and |r| <= ln 2 / 2; returns r and sets j.
[[gnu::always_inline]] inline float reduce(float y, std::int32_t& j) {
  const float z = y * kLog2e + kShift;
  const float jf = z - kShift;
  j = std::bit_cast<std::int32_t>(z) - std::bit_cast<std::int32_t>(kShift);
  return (y - jf * kLn2Hi) - jf * kLn2Lo;
}

// |x| clamped to at most `limit` (a positive float), as bits; NaN comes out as `limit`, so callers put it back.
// Note: the clamps and selects are integer operations on the bits. A float comparison may raise the invalid
// exception on NaN, and under -ftrapping-math (GCC's default) GCC then refuses to if-convert, so the x86-64-v2
// clone was left scalar.
[[gnu::always_inline]] inline float clamped_magnitude(std::int32_t bits, float limit) {
  const std::int32_t magnitude = bits & 0x7fffffff, top = std::bit_cast<std::int32_t>(limit);
  return std::bit_cast<float>(magnitude > top ? top : magnitude);
}

// `result`, or a quiet NaN where `bits` is a NaN. Note: by bits again, not a select between floats, which GCC
// would turn back into a branch around the division that computes `result`.
[[gnu::always_inline]] inline float nan_where_nan(std::int32_t bits, float result) {
  const std::int32_t nan_mask = -static_cast<std::int32_t>((bits & 0x7fffffff) > 0x7f800000);
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(result) | (nan_mask & 0x7fc00000));
}

// exp(-a) for 0 <= a <= 104. Note: below exp(-104) the result rounds to 0 anyway; the scale 2^j (j >= -150) is
// applied as two normal factors, so a result in the subnormal range is rounded once, not flushed.
[[gnu::always_inline]] inline float exp_negative(float a) {
  std::int32_t j;
  const float r = reduce(-a, j);
  const std::int32_t half = j >> 1;
  return (1.0f + expm1_reduced(r)) * pow2(half) * pow2(j - half);
}

// exp(-|a|) for any float a: |a| clamped to 104 (exp(-104) rounds to 0); NaN stays NaN.
[[gnu::always_inline]] inline float exp_minus_magnitude(float a) {
  const auto bits = std::bit_cast<std::int32_t>(a);
  return nan_where_nan(bits, exp_negative(clamped_magnitude(bits, 104.0f)));
}

}  // namespace tapegrad::kernels::exp_reduced
