#pragma once
// Internal (not installed): max and average pooling over channels-last (dense NHWC) arrays, forward and backward.
// Each loop runs over the channels innermost, where the memory is contiguous, so it vectorises for any window;
// ops/pool_nhwc.cpp records them. Per element, every loop adds and compares in the same order as the NCHW loops
// of ops/pool.cpp and ops/max_pool.cpp, so both formats give bit-identical values and gradients.
#include <cstdint>

namespace tapegrad::kernels {

/// An [n, h, w, c] input pooled to [n, oh, ow, c].
struct NhwcPlanes {
  std::int64_t n, h, w, c, oh, ow;
};

/// Max-pool windows: output (i, j) looks at rows i*stride_h - pad_h + ki*dilation_h for ki in
/// [row_first[i], row_last[i]) (the taps inside the input), and likewise for columns.
struct NhwcMaxWindows {
  std::int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  const std::int64_t *row_first, *row_last, *col_first, *col_last;
};

/// out[n, i, j, c] = the first maximum of its window (a NaN wins, the last one, as PyTorch's rule), and
/// indices[n, i, j, c] = its place h * w_in + w in the input plane, as PyTorch's indices.
template <class T>
void max_pool_nhwc(const T* x, const NhwcPlanes& p, const NhwcMaxWindows& win, T* out, std::int64_t* indices);

/// dx (all of it written) = the scatter of g [n, oh, ow, c] to the saved argmax positions, summed where windows
/// share a maximum.
template <class T>
void max_pool_nhwc_backward(const T* g, const std::int64_t* indices, const NhwcPlanes& p, T* dx);

/// out[n, i, j, c] = x[n, argmax, c]: the adjoint of the scatter (the backward of the backward).
template <class T>
void max_pool_nhwc_gather(const T* x, const std::int64_t* indices, const NhwcPlanes& p, T* out);

/// Average windows along one axis: output i averages [start[i], end[i]) with divisor[i] as this axis's factor.
struct NhwcAxisWindows {
  const std::int64_t *start, *end, *divisor;
};

/// out[n, i, j, c] = sum of the window / (row divisor * column divisor), 0 for an empty window.
template <class T>
void avg_pool_nhwc(const T* x, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols, T* out);

/// dx (all of it written) = each output's gradient spread evenly over its window.
template <class T>
void avg_pool_nhwc_backward(const T* g, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols,
                            T* dx);

}  // namespace tapegrad::kernels
