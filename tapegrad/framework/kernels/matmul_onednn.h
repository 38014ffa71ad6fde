#pragma once
// Internal: the float32 (and bfloat16-input) matrix product as oneDNN matmul primitives, created once per shape and kept in a bounded
// cache.
#include <cstddef>
#include <cstdint>

namespace tapegrad::kernels::onednn {

/// C = op(A) op(B) (+ bias broadcast over the rows, if not null), row-major as kernels::gemm with alpha 1 and
/// beta 0; bias has n entries. Returns false, computing nothing, when oneDNN has no matmul for this layout (the
/// caller then takes another path).
bool matmul(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, const float* bias, float* c, std::int64_t ldc);

/// The same product with bfloat16 A and B (raw bits, round-to-nearest-even copies made by the caller), float32
/// bias and C, accumulated in float32 by oneDNN's AVX512-BF16 / AMX (or AVX-512 emulated) kernels. Returns false,
/// computing nothing, where oneDNN has no bfloat16 matmul (a CPU without AVX-512).
bool matmul_bf16(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, const float* bias,
                 float* c, std::int64_t ldc);

/// The matmul cache's current number of entries and its bound.
std::size_t matmul_cache_size();
std::size_t matmul_cache_capacity();

}  // namespace tapegrad::kernels::onednn
