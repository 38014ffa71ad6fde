#pragma once
// Internal: the NCHW <-> NHWC conversion of a dense tensor, as a transpose of each sample's [C, H*W] plane.
//
// Note: the generic strided copy (for_each_run) walks the destination in order with a run-time inner trip count,
// so each source element is a strided load waiting on the one before, and converting an NHWC map back to NCHW
// reads with a stride of C across more lines than L1 holds. A band of 16 source rows with a compile-time height
// keeps 16 independent loads in flight and the band's lines in L1. Median of 200, 1 thread, load ~3 (2026-12-07):
// float32 [64, 32, 28, 28] to channels-last 0.93 -> 0.61 ms, back 1.45 -> 0.89 ms; [64, 64, 14, 14] 0.32 -> 0.25
// and 0.46 -> 0.27 ms; [64, 256, 4, 4] 0.10 -> 0.07 and 0.15 -> 0.06 ms. The input batch of every channels-last
// training step and the global average pool's input pay it.
#include <cstdint>

#include <tapegrad/framework/detail/parallel_loop.h>

namespace tapegrad::detail {

/// dst[p][c][r] = src[p][r][c] for p < planes, r < rows, c < cols: each source plane is a dense row-major
/// rows x cols matrix, each destination plane its dense transpose. Moves elements only (any trivially copyable T).
template <class T>
void transpose_planes(const T* src, T* dst, std::int64_t planes, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kTile = 16;
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  const std::int64_t plane_size = rows * cols;
  // One work item per (plane, band of kTile source rows): enough items to split across threads even for a
  // single sample, and each item writes disjoint destination columns.
  const std::int64_t items = planes * row_tiles;
  parallel_for(items, use_threads(planes * plane_size, kElementwiseParallel), [&](std::int64_t item) {
    const std::int64_t p = item / row_tiles;
    const std::int64_t r0 = (item % row_tiles) * kTile;
    const T* from = src + p * plane_size + r0 * cols;
    T* to = dst + p * plane_size + r0;
    if (r0 + kTile <= rows) {
      // Note: a full band has a compile-time height, so the compiler unrolls the inner loop into kTile
      // independent loads and stores (a run-time trip count left one load in flight at a time: 1.6x slower).
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t r = 0; r < kTile; ++r) to[c * rows + r] = from[r * cols + c];
    } else {
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t r = 0; r < rows - r0; ++r) to[c * rows + r] = from[r * cols + c];
    }
  });
}

}  // namespace tapegrad::detail
