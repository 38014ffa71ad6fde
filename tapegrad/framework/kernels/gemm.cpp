// The GEMM kernel: oneDNN's sgemm for float32, Eigen for float64.
#include <tapegrad/framework/kernels/gemm.h>

#include <Eigen/Core>
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include <tapegrad/framework/error.h>

namespace tapegrad::kernels {

namespace {

// C = beta * C, the whole product when k == 0 (an empty sum), which oneDNN's sgemm may not accept.
template <class T>
void scale_only(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

}  // namespace

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
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
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Stride>;
  // op(A) is m x k: stored as k x m when transposed
  const ConstMap A(a, transpose_a ? k : m, transpose_a ? m : k, Stride(lda));
  const ConstMap B(b, transpose_b ? n : k, transpose_b ? k : n, Stride(ldb));
  Eigen::Map<Matrix, Eigen::Unaligned, Stride> C(c, m, n, Stride(ldc));
  if (beta == 0.0)
    C.setZero();
  else if (beta != 1.0)
    C *= beta;
  // Note: C never aliases A or B (the ops always write a fresh tensor or a private partial), so noalias()
  // is safe and avoids Eigen's temporary.
  if (!transpose_a && !transpose_b)
    C.noalias() += alpha * (A * B);
  else if (!transpose_a)
    C.noalias() += alpha * (A * B.transpose());
  else if (!transpose_b)
    C.noalias() += alpha * (A.transpose() * B);
  else
    C.noalias() += alpha * (A.transpose() * B.transpose());
}

const char* gemm_backend(bool float64) {
  static const std::string onednn = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " sgemm";
  }();
  static const std::string eigen = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                                   std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION);
  return float64 ? eigen.c_str() : onednn.c_str();
}

}  // namespace tapegrad::kernels
