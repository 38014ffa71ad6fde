#pragma once
// Internal (not installed): the kernels layer's matrix product. Ops keep their shape checks and tape
// records; this computes, and nothing above it knows which library does.
#include <cstdint>

namespace tapegrad::kernels {

/// C = alpha * op(A) op(B) + beta * C over row-major matrices: op(A) is m x k, op(B) is k x n, C is m x n,
/// with leading dimensions lda, ldb, ldc (the row strides of A, B and C as stored). float32 runs on oneDNN's
/// sgemm, which picks its AVX2 / AVX-512 / AMX code from the CPU at run time; float64 on Eigen (oneDNN has
/// no double GEMM). Threads: up to get_num_threads(), one inside an OpenMP parallel region.
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc);

/// Which library computes each dtype's GEMM ("oneDNN 2.6.3 sgemm", "Eigen 3.4.0"), for benchmarks and docs.
const char* gemm_backend(bool float64);

}  // namespace tapegrad::kernels
