#pragma once
// Internal (not installed): the float32 2x2, stride-2 max pool over one plane, forward and backward, in short
// vectors dispatched to AVX2 / AVX-512 at run time (framework/kernels/dispatch.h). framework/ops/max_pool.cpp
// decides when it applies and handles PyTorch's NaN rule, float64 and every other geometry.
#include <cstdint>

namespace tapegrad::kernels {

/// Pools one h x w plane (row stride `width`) to oh x ow by the disjoint windows rows [2i, 2i+2) x columns
/// [2j, 2j+2), where 2 oh <= h, 2 ow <= width and ow >= 4 (narrower rows take ops/max_pool.cpp's scalar loop).
/// Writes each window's first maximum in tap order to out[i * ow + j] and that tap to taps[i * ow + j]: 0
/// top-left, 1 top-right, 2 bottom-left, 3 bottom-right. Returns false when some window holds a NaN; out and
/// taps are then unspecified.
bool max_pool_2x2_plane(const float* x, std::int64_t width, std::int64_t oh, std::int64_t ow, float* out,
                        std::uint8_t* taps);

/// The gradient of that pool (same conditions): writes all of the h x width plane dx, g[i * ow + j] at window
/// (i, j)'s tap taps[i * ow + j] (0..3, as above) and 0 everywhere else, including rows and columns no window
/// covers.
void max_pool_2x2_plane_backward(const float* g, const std::uint8_t* taps, std::int64_t h, std::int64_t width,
                                 std::int64_t oh, std::int64_t ow, float* dx);

}  // namespace tapegrad::kernels
