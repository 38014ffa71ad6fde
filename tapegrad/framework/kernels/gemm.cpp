// The GEMM kernel: oneDNN for float32 (its matmul primitive or its sgemm, by the rule below), tapegrad's own
// kernel for float64 (kernels/gemm_f64.cpp).
#include <tapegrad/framework/kernels/gemm.h>

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/autocast_path.h>
#include <tapegrad/framework/kernels/environment_path.h>
#include <tapegrad/framework/kernels/gemm_f64.h>
#include <tapegrad/framework/kernels/matmul_onednn.h>

namespace tapegrad::kernels {

namespace {

// C = beta * C; zero when beta is 0, whatever C held (NaNs too), as in BLAS. The whole product when k == 0 (an
// empty sum), which oneDNN's sgemm may not accept; float64's kernel accumulates onto C after this.
template <class T>
void scale_only(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

// Note: TAPEGRAD_GEMM_PATH=sgemm or =matmul_primitive overrides the rule for every float32 product (read once),
// so that one binary measures whole workloads on either path in the same run; an explicit path given to a kernel
// still wins. Unset or empty, the rule decides.
GemmPath environment_path() {
  static const GemmPath path =
      path_from_environment("TAPEGRAD_GEMM_PATH", GemmPath::automatic,
                            {{"sgemm", GemmPath::sgemm}, {"matmul_primitive", GemmPath::matmul_primitive}});
  return path;
}

// The path a float32 op(A) op(B) of m rows takes (k > 0).
// Note: the rule, measured on AVX-512 (bench/gemm_paths, 2026-12-06, 1 and 2 threads): for A B^T the primitive
// is 0.99-1.30x sgemm's speed on one thread and 0.92-1.67x on two from 16 rows up (below 1.0x only for a
// 10-column product), but 0.3-0.8x at 1-4 rows; for A B and A^T B it is at best level with sgemm (0.5-1.1x),
// so those stay on sgemm, which needs no per-shape primitive.
GemmPath resolve(GemmPath path, bool transpose_a, bool transpose_b, std::int64_t m) {
  if (path == GemmPath::automatic) path = environment_path();
  if (path != GemmPath::automatic) return path;
  return !transpose_a && transpose_b && m >= 16 ? GemmPath::matmul_primitive : GemmPath::sgemm;
}

// Note: a float32 product of fewer multiply-adds than this is over in about 10 microseconds, less than a second
// thread takes to join it, and on a busy machine a parallel region can wait a whole time slice for a
// descheduled thread: a 2-layer LSTM of hidden size 16 (one GEMM per step) trained 40x slower at 2 threads than
// at 1 while other processes shared the cores. Such products run on the calling thread alone. oneDNN reads the
// thread count from OpenMP at each call (and matmul_onednn.cpp keys its primitives by it), so the calling
// thread's count is set to 1 for the call. The float64 kernel has its own threshold (gemm_f64.cpp).
constexpr std::int64_t kMinThreadedMacs = std::int64_t{1} << 18;

class OneThreadFor {
 public:
  explicit OneThreadFor(bool active) : saved_(active ? omp_get_max_threads() : 0) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~OneThreadFor() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  OneThreadFor(const OneThreadFor&) = delete;
  OneThreadFor& operator=(const OneThreadFor&) = delete;

 private:
  int saved_;
};

bool small_product(std::int64_t m, std::int64_t n, std::int64_t k) {
  return m * n < kMinThreadedMacs && m * n * k < kMinThreadedMacs;  // the first test keeps m * n * k from overflowing
}

template <class T>
void linear_by_gemm(std::int64_t rows, std::int64_t out, std::int64_t in, const T* x, const T* w, const T* bias,
                    T* y) {
  if (bias)
    for (std::int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
  gemm(false, true, rows, out, in, T(1), x, in, w, in, bias ? T(1) : T(0), y, out, GemmPath::sgemm);
}

}  // namespace

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
          GemmPath path) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  const OneThreadFor serial(small_product(m, n, k));
  if (alpha == 1.0f && beta == 0.0f && resolve(path, transpose_a, transpose_b, m) == GemmPath::matmul_primitive &&
      onednn::matmul(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, nullptr, c, ldc))
    return;
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda,
                                          b, ldb, beta, c, ldc);
  // Note: oneDNN only fails here on invalid arguments, which the ops' shape checks rule out: a failure is a
  // bug in tapegrad, reported with the call.
  if (status != dnnl_success)
    fail("gemm: oneDNN sgemm failed with status {} for m={} n={} k={} lda={} ldb={} ldc={}",
         static_cast<int>(status), m, n, k, lda, ldb, ldc);
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc, GemmPath /*path: float64 has one*/) {
  if (m == 0 || n == 0) return;
  if (beta != 1.0) scale_only(m, n, beta, c, ldc);
  if (k > 0) gemm_f64(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

void linear(std::int64_t rows, std::int64_t out, std::int64_t in, const float* x, const float* w, const float* bias,
            float* y, GemmPath path) {
  if (rows == 0 || out == 0) return;
  const OneThreadFor serial(small_product(rows, out, in));
  if (in > 0 && resolve(path, false, true, rows) == GemmPath::matmul_primitive &&
      onednn::matmul(false, true, rows, out, in, x, in, w, in, bias, y, out))
    return;
  linear_by_gemm(rows, out, in, x, w, bias, y);
}

void linear(std::int64_t rows, std::int64_t out, std::int64_t in, const double* x, const double* w,
            const double* bias, double* y, GemmPath /*path: float64 has one*/) {
  if (rows == 0 || out == 0) return;
  linear_by_gemm(rows, out, in, x, w, bias, y);
}

namespace {

// The elements a row-major matrix of `rows` x `cols` (stored transposed when `transposed`) spans in memory.
std::int64_t span(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool transposed) {
  const std::int64_t stored_rows = transposed ? cols : rows, stored_cols = transposed ? rows : cols;
  return (stored_rows - 1) * ld + stored_cols;
}

}  // namespace

void gemm_bf16(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, const float* bias,
               float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k > 0 && !autocast::fallback_forced()) {
    const OneThreadFor serial(small_product(m, n, k));
    if (onednn::matmul_bf16(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, bias, c, ldc)) return;
  }
  // The fallback: the same rounded operands, exactly widened, multiplied and summed in float32.
  std::vector<float> wide_a(k > 0 ? span(m, k, lda, transpose_a) : 0), wide_b(k > 0 ? span(k, n, ldb, transpose_b) : 0);
  autocast::widen_bf16(a, wide_a.data(), static_cast<std::int64_t>(wide_a.size()));
  autocast::widen_bf16(b, wide_b.data(), static_cast<std::int64_t>(wide_b.size()));
  if (bias)
    for (std::int64_t r = 0; r < m; ++r) std::copy(bias, bias + n, c + r * ldc);
  gemm(transpose_a, transpose_b, m, n, k, 1.0f, wide_a.data(), lda, wide_b.data(), ldb, bias ? 1.0f : 0.0f, c, ldc);
}

bool gemm_bf16_native() {
  static const bool native = [] {
    const std::vector<std::uint16_t> a(256, 0x3f80), b(256, 0x3f80);  // bfloat16 ones
    std::vector<float> c(256);
    return onednn::matmul_bf16(false, false, 16, 16, 16, a.data(), 16, b.data(), 16, nullptr, c.data(), 16) &&
           c[0] == 16.0f;
  }();
  return native;
}

std::size_t gemm_cache_size() { return onednn::matmul_cache_size(); }
std::size_t gemm_cache_capacity() { return onednn::matmul_cache_capacity(); }

const char* gemm_backend(bool float64) {
  static const std::string onednn = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " matmul and sgemm";
  }();
  static const std::string own = std::string("tapegrad ") + gemm_f64_kernel();
  return float64 ? own.c_str() : onednn.c_str();
}

}  // namespace tapegrad::kernels
