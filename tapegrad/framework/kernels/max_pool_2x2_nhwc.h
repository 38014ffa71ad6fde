#pragma once
// Internal (not installed): the disjoint 2x2, stride-2 max pool over a channels-last (dense NHWC) array, forward
// and backward, vectorised over the channels and dispatched to AVX2 / AVX-512 at run time
// (framework/kernels/dispatch.h). The argmax is saved as one byte per output, the window's tap, as the NCHW kernel
// (kernels/max_pool_2x2.h) does: 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right. ops/max_pool_nhwc.cpp
// decides when it applies (kernel 2, stride 2, no padding, dilation 1, no window over the edge).
#include <cstdint>

namespace tapegrad::kernels {

/// An [n, h, w, c] input pooled to [n, oh, ow, c] by the windows rows [2i, 2i+2) x columns [2j, 2j+2), with
/// 2 oh <= h and 2 ow <= w.
struct Nhwc2x2 {
  std::int64_t n, h, w, c, oh, ow;
};

/// out = each window's first maximum in tap order and taps = that tap; a window holding a NaN takes PyTorch's
/// rule (the last NaN wins), as ops/max_pool.cpp's loops. Values and taps are those of the NCHW kernels.
void max_pool_2x2_nhwc(const float* x, const Nhwc2x2& p, float* out, std::uint8_t* taps);
void max_pool_2x2_nhwc(const double* x, const Nhwc2x2& p, double* out, std::uint8_t* taps);

/// Writes all of dx [n, h, w, c]: g [n, oh, ow, c] at each window's tap, 0 everywhere else (including the last
/// row and column when no window covers them).
void max_pool_2x2_nhwc_backward(const float* g, const std::uint8_t* taps, const Nhwc2x2& p, float* dx);
void max_pool_2x2_nhwc_backward(const double* g, const std::uint8_t* taps, const Nhwc2x2& p, double* dx);

}  // namespace tapegrad::kernels
