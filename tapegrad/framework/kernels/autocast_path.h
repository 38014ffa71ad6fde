#pragma once
// Internal: which path autocast's bfloat16 products take, and the float32 <-> bfloat16 array conversions they use.
//
// Note: the fast path is oneDNN's bfloat16 primitives (bfloat16 operands, float32 accumulation and output), which
// exist on a CPU with AVX-512 (AVX512-BF16 and AMX natively, plain AVX-512 emulated). Elsewhere (AVX2, SSE4) oneDNN
// 2.6 has none, and the kernels fall back to widening the same rounded operands back to float32 (exact) and
// multiplying them on the float32 kernels: the same products summed in float32, so the two paths differ only by
// the order of the float32 sums.
#include <cstdint>

namespace tapegrad::kernels::autocast {

/// True when the fallback is forced: by force_fallback(true) or by TAPEGRAD_AUTOCAST_PATH=fallback in the
/// environment (read once; =onednn or unset leaves the choice to what oneDNN implements).
bool fallback_forced();
/// Test hook: forces the fallback on (true) or returns to the environment's choice (false), process-wide.
void force_fallback(bool forced);

/// y[i] = x[i] rounded to bfloat16 (round to nearest even; NaN stays NaN), as raw bits; split across the OpenMP
/// threads for a long array (same bits for any thread count).
void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n);
/// y[i] = x[i] widened to float32 (exact).
void widen_bf16(const std::uint16_t* x, float* y, std::int64_t n);

}  // namespace tapegrad::kernels::autocast
