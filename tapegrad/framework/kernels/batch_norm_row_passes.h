#pragma once
// Internal (not installed): BatchNorm's passes over an [R, C] input (S == 1 in BatchNormLayout): a channels-last
// feature map seen as [N*H*W, C], or BatchNorm1d's [N, C]. Threads own contiguous ranges of rows and walk them in
// tiles of a few kilobytes; the tile loops (batch_norm_tiles.h) keep a chunk of channels' sums in registers across
// a tile's rows. framework/kernels/batch_norm_passes.cpp calls these when use_row_tiles() says so.
#include <cstdint>
#include <vector>

#include <tapegrad/framework/kernels/batch_norm_passes.h>
#include <tapegrad/framework/kernels/batch_norm_tiles.h>

namespace tapegrad::kernels {

/// Whether the passes over `l` take the row tiles: S == 1 and at least row_tiles_min_rows rows.
bool use_row_tiles(const BatchNormLayout& l);

/// Sets the row count from which use_row_tiles() says yes and returns the previous one. For benchmarks that run
/// the row tiles and the per-row kernels on the same tensors in one process (bench/batch_norm_rows.cpp).
std::int64_t set_row_tiles_min_rows(std::int64_t rows);

/// batch_norm_train_forward's contract: mean, sum of squared deviations and invstd per channel (one pass, the
/// deviations shifted by row 0's values, as the [N, C, S] paths), then y = affine(x), relu'd when `relu`.
template <class T>
void rows_train_forward(const T* x, const BatchNormLayout& l, const std::vector<double>& weight,
                        const std::vector<double>& bias, double eps, T* y, std::vector<double>& mean,
                        std::vector<double>& var_sum, std::vector<double>& invstd, bool relu);

/// out[r, c] = (src[r, c] - shift[c]) * scale[c] + offset[c], relu'd when `relu`.
template <class T>
void rows_affine(const T* src, const BatchNormLayout& l, const T* shift, const T* scale, const T* offset, T* out,
                 bool relu);

/// Per channel, sum(g) and sum(g * (x - mean)), g masked by `mask` when it is set.
template <class T>
void rows_grad_sums(const T* g, const T* x, const BatchNormLayout& l, const std::vector<double>& mean,
                    const TileMask<T>& mask, std::vector<double>& sum_g, std::vector<double>& sum_gxc);

/// batch_norm_train_backward's contract, the ReLU mask given as its T coefficients (unset: no ReLU).
template <class T>
void rows_train_backward(const T* g, const T* x, const BatchNormLayout& l, const std::vector<double>& weight,
                         const std::vector<double>& mean, const std::vector<double>& invstd, T* dx,
                         std::vector<double>& sum_g, std::vector<double>& sum_gxc, const TileMask<T>& mask);

}  // namespace tapegrad::kernels
