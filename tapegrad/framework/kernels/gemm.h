#pragma once
// Internal (not installed): the kernels layer's matrix product. Ops keep their shape checks and tape
// records; this computes, and nothing above it knows which library does.
#include <cstddef>
#include <cstdint>

namespace tapegrad::kernels {

/// Who computes a float32 product: oneDNN's dnnl_sgemm, or a oneDNN matmul primitive (created per shape and
/// cached; alpha 1 and beta 0 only, else sgemm). `automatic` is the measured rule in gemm.cpp. float64 ignores it.
enum class GemmPath { automatic, sgemm, matmul_primitive };

/// C = alpha * op(A) op(B) + beta * C over row-major matrices: op(A) is m x k, op(B) is k x n, C is m x n,
/// with leading dimensions lda, ldb, ldc (the row strides of A, B and C as stored). float32 runs on oneDNN's
/// sgemm, which picks its AVX2 / AVX-512 / AMX code from the CPU at run time; float64 on tapegrad's own kernel
/// (kernels/gemm_f64.h; oneDNN has no double GEMM), which picks its AVX2 / AVX-512 code likewise.
/// Threads: up to get_num_threads(), one inside an OpenMP parallel region.
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
          GemmPath path = GemmPath::automatic);
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc, GemmPath path = GemmPath::automatic);

/// y = x W^T + bias, a Linear's forward over row-major matrices: x is rows x in, W is out x in, bias has out
/// entries (or is null), y is rows x out. On the matmul primitive the bias is added in its epilogue; otherwise it
/// is copied into y and the GEMM above accumulates onto it.
void linear(std::int64_t rows, std::int64_t out, std::int64_t in, const float* x, const float* w, const float* bias,
            float* y, GemmPath path = GemmPath::automatic);
void linear(std::int64_t rows, std::int64_t out, std::int64_t in, const double* x, const double* w,
            const double* bias, double* y, GemmPath path = GemmPath::automatic);

/// C = op(A) op(B) (+ bias broadcast over the rows, if not null) with bfloat16 A and B (raw bits, already rounded
/// by the caller), float32 bias and C: autocast's product. On oneDNN's bfloat16 matmul primitive where the CPU has
/// one (AVX-512 and up), else A and B widened back to float32 and multiplied by the float32 gemm above (see
/// kernels/autocast_path.h). Overwrites C (alpha 1, beta 0).
void gemm_bf16(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, const float* bias,
               float* c, std::int64_t ldc);

/// True when gemm_bf16 runs on oneDNN's bfloat16 matmul on this CPU (AVX-512 and up), false where it falls back
/// to float32 (probed once with a 16 x 16 x 16 product).
bool gemm_bf16_native();

/// The matmul-primitive cache: how many primitives it holds now, and the most it ever holds (least recently used
/// evicted first). Primitives are keyed by transposes, extents, leading dimensions, bias and thread count.
std::size_t gemm_cache_size();
std::size_t gemm_cache_capacity();

/// Which library computes each dtype's GEMM ("oneDNN 2.6.3 matmul and sgemm", "tapegrad AVX-512 8x24"), for
/// benchmarks and docs.
const char* gemm_backend(bool float64);

}  // namespace tapegrad::kernels
