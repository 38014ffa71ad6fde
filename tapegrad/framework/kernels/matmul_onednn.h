#pragma once
// Internal: the float32 matrix product as oneDNN matmul primitives, created once per shape and kept in a bounded
// cache.
#include <cstddef>
#include <cstdint>

namespace tapegrad::kernels::onednn {

/// C = op(A) op(B) (+ bias broadcast over the rows, if not null), row-major as kernels::gemm with alpha 1 and
/// beta 0; bias has n entries. Returns false, computing nothing, when oneDNN has no matmul for this layout (the
/// caller then takes another path).
bool matmul(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, const float* bias, float* c, std::int64_t ldc);

/// The matmul cache's current number of entries and its bound.
std::size_t matmul_cache_size();
std::size_t matmul_cache_capacity();

}  // namespace tapegrad::kernels::onednn
