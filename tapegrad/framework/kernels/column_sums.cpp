// Column sums in blocks of columns whose double accumulators stay in L1, one pass over the rows per block.
// Note: Linear's bias gradient was an Eigen colwise sum over a row-major map, a strided reduction at the x86-64-v2
// baseline: 1.6% of an mlp training step (2026-12-06 profile). Accumulating in double also keeps a long batch
// from drifting the way a float32 running sum does.
#include <tapegrad/framework/kernels/column_sums.h>

#include <algorithm>

#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

constexpr std::int64_t kBlock = 512;  // columns per block: 4 KiB of double accumulators

template <class T>
[[gnu::always_inline]] inline void column_sums_body(std::int64_t rows, std::int64_t cols, const T* a, T* out) {
  double acc[kBlock];
  for (std::int64_t j0 = 0; j0 < cols; j0 += kBlock) {
    const std::int64_t width = std::min(kBlock, cols - j0);
    std::fill(acc, acc + width, 0.0);
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* row = a + i * cols + j0;
#pragma omp simd
      for (std::int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(row[j]);
    }
    for (std::int64_t j = 0; j < width; ++j) out[j0 + j] = static_cast<T>(acc[j]);
  }
}

}  // namespace

TAPEGRAD_DISPATCH
void column_sums(std::int64_t rows, std::int64_t cols, const float* a, float* out) {
  column_sums_body(rows, cols, a, out);
}

TAPEGRAD_DISPATCH
void column_sums(std::int64_t rows, std::int64_t cols, const double* a, double* out) {
  column_sums_body(rows, cols, a, out);
}

}  // namespace tapegrad::kernels
