#pragma once
// Internal (not installed): tapegrad's own float64 GEMM, behind kernels::gemm (oneDNN has no double GEMM).
#include <cstdint>
#include <string>
#include <vector>

namespace tapegrad::kernels {

/// C += alpha * op(A) op(B) over row-major matrices, as kernels::gemm without beta (the caller scales C first);
/// m, n, k > 0. Packed panels and a register-tiled micro-kernel, compiled for AVX-512, AVX2 + FMA and the SSE
/// baseline and chosen once from the CPU at run time. Threads: up to get_num_threads(), one inside an OpenMP
/// parallel region. Each element of C sums its k products in the same order at any thread count.
void gemm_f64(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
              const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double* c, std::int64_t ldc);

/// The micro-kernel this CPU got, e.g. "AVX-512 8x24" (instruction set, rows x columns of C per tile).
const char* gemm_f64_kernel();

/// Every micro-kernel this CPU and build can run, the one gemm_f64 uses first (a build without run-time dispatch
/// has one), and gemm_f64 on one of them by name (throws for another): tests check each tile and benchmarks time
/// each on a CPU that runs them all.
std::vector<std::string> gemm_f64_kernels();
void gemm_f64_on(const std::string& kernel, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                 std::int64_t k, double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                 double* c, std::int64_t ldc);

}  // namespace tapegrad::kernels
