#pragma once
// Internal (not installed): the sums down the columns of a row-major matrix, Linear's bias gradient.
#include <cstdint>

namespace tapegrad::kernels {

/// out[j] = sum over i < rows of a[i * cols + j], for j < cols; accumulated in double and rounded once.
/// Note: row by row, so that the inner loop runs along contiguous memory (vectorised, dispatched to AVX2 /
/// AVX-512 at run time); the same order at any thread count.
void column_sums(std::int64_t rows, std::int64_t cols, const float* a, float* out);
void column_sums(std::int64_t rows, std::int64_t cols, const double* a, double* out);

}  // namespace tapegrad::kernels
