#pragma once
// Internal (not installed): float32 <-> bfloat16 array conversion, the hot loop of every bfloat16 conversion.
#include <cstdint>
#include <string>
#include <vector>

namespace tapegrad::kernels {

/// out[i] = bfloat16_from_float(in[i]).bits for i < n (tapegrad/framework/bfloat16.h: round to nearest even, NaN
/// quiet with its sign kept, subnormals rounded, not flushed). Chosen once from the CPU at run time: AVX512-BF16
/// (vcvtneps2bf16, with subnormal lanes redone in integers, as the instruction flushes them to zero), AVX-512 or
/// AVX2 integer rounding, or the scalar loop; every path gives the scalar function's bits. No threads.
void float_to_bfloat16(const float* in, std::uint16_t* out, std::int64_t n);

/// out[i] = the float with bits in[i] << 16 (exact), for i < n.
void bfloat16_to_float(const std::uint16_t* in, float* out, std::int64_t n);

/// The path this CPU got, e.g. "AVX512-BF16".
const char* bfloat16_convert_kernel();

/// Every path this CPU and build can run, the one used by default first (a build without run-time dispatch has
/// one plus the scalar loop), and the conversions on one of them by name (throws for another): tests check that
/// each gives the scalar path's bits.
std::vector<std::string> bfloat16_convert_kernels();
void float_to_bfloat16_on(const std::string& kernel, const float* in, std::uint16_t* out, std::int64_t n);
void bfloat16_to_float_on(const std::string& kernel, const std::uint16_t* in, float* out, std::int64_t n);

}  // namespace tapegrad::kernels
