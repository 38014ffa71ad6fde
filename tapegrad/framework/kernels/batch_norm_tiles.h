#pragma once
// Internal (not installed): BatchNorm's innermost loops over a tile of rows of an [R, C] matrix (row stride C):
// a channels-last feature map seen as [N*H*W, C], or BatchNorm1d's [N, C] with many rows. Each call walks all
// the tile's rows for a chunk of 16 (or 8) channels with that chunk's accumulators and coefficients held in
// vector registers, then moves to the next chunk; the per-row kernels of batch_norm_runs.h instead loaded and
// stored a double accumulator per channel and row, and were one call per row (C is only 32..256 here).
// framework/kernels/batch_norm_row_passes.cpp chooses the tiles and threads. Dispatched to AVX2 / AVX-512 at run
// time (framework/kernels/dispatch.h); sums in double, whatever T; built without FMA contraction, as
// batch_norm_runs.cpp and for the same reason (the fused ReLU backward recomputes the forward's bits).
#include <cstdint>

namespace tapegrad::kernels {

/// sum[c] += sum over rows of (x[r, c] - shift[c]), squares[c] += the sum of its squares, c < width.
void tile_moments(const float* x, std::int64_t rows, std::int64_t width, const double* shift, double* sum,
                  double* squares);
void tile_moments(const double* x, std::int64_t rows, std::int64_t width, const double* shift, double* sum,
                  double* squares);

/// q[r, c] = (p[r, c] - shift[c]) * scale[c] + offset[c], relu'd as it is stored when `relu` (affine_row's bits).
void tile_affine(const float* p, float* q, std::int64_t rows, std::int64_t width, const float* shift,
                 const float* scale, const float* offset, bool relu);
void tile_affine(const double* p, double* q, std::int64_t rows, std::int64_t width, const double* shift,
                 const double* scale, const double* offset, bool relu);

/// ReLU's mask for the fused BatchNorm+ReLU backward: g counts where (x - shift) * scale + offset (the forward's
/// ReLU input, recomputed in T) is > 0 or NaN. All null: no mask.
template <class T>
struct TileMask {
  const T* shift = nullptr;
  const T* scale = nullptr;
  const T* offset = nullptr;
};

/// sum_g[c] += sum of g[r, c] (masked), sum_gxc[c] += sum of g[r, c] * (x[r, c] - mean[c]).
void tile_grad_sums(const float* g, const float* x, std::int64_t rows, std::int64_t width, const double* mean,
                    const TileMask<float>& mask, double* sum_g, double* sum_gxc);
void tile_grad_sums(const double* g, const double* x, std::int64_t rows, std::int64_t width, const double* mean,
                    const TileMask<double>& mask, double* sum_g, double* sum_gxc);

/// dx[r, c] = a[c] * g[r, c] + b[c] * (x[r, c] - mean[c]) + d[c], g masked when mask.scale is set (the mask's
/// shift is `mean`, as grad_input_row_relu's).
void tile_grad_input(const float* g, const float* x, float* dx, std::int64_t rows, std::int64_t width,
                     const float* mean, const float* a, const float* b, const float* d, const TileMask<float>& mask);
void tile_grad_input(const double* g, const double* x, double* dx, std::int64_t rows, std::int64_t width,
                     const double* mean, const double* a, const double* b, const double* d,
                     const TileMask<double>& mask);

}  // namespace tapegrad::kernels
