// The kernels layer's GEMM (oneDNN for float32, Eigen for float64) against a plain triple loop in double:
// every transpose combination, leading dimensions wider than the rows, alpha and beta, empty dims.
#include <cmath>
#include <vector>

#include <tapegrad/framework/kernels/gemm.h>
#include "support/properties.h"

using tapegrad::kernels::gemm;

namespace {

// The reference: C = alpha op(A) op(B) + beta C, in double.
template <class T>
std::vector<double> reference(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                              const std::vector<T>& a, std::int64_t lda, const std::vector<T>& b, std::int64_t ldb,
                              double beta, const std::vector<T>& c, std::int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double total = 0;
      for (std::int64_t p = 0; p < k; ++p)
        total += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * static_cast<double>(tb ? b[j * ldb + p] : b[p * ldb + j]);
      out[i * ldc + j] = alpha * total + (beta == 0 ? 0.0 : beta * static_cast<double>(c[i * ldc + j]));
    }
  return out;
}

template <class T>
void check_gemm(double tolerance) {
  const bool ta = *rc::gen::arbitrary<bool>(), tb = *rc::gen::arbitrary<bool>();
  const auto m = *rc::gen::inRange<std::int64_t>(0, 40), n = *rc::gen::inRange<std::int64_t>(0, 40),
             k = *rc::gen::inRange<std::int64_t>(0, 70);
  const auto pad = *rc::gen::inRange<std::int64_t>(0, 3);
  const double alpha = *rc::gen::element(1.0, -0.5, 2.0), beta = *rc::gen::element(0.0, 1.0, 0.25);
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  auto values = [](std::int64_t count) {
    std::vector<T> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = static_cast<T>(*rc::gen::inRange(-64, 65)) / T(16);
    return v;
  };
  const std::vector<T> a = values(a_rows * lda), b = values(b_rows * ldb);
  std::vector<T> c = values(m * ldc);
  if (beta == 0.0)  // beta = 0 must ignore C, NaNs included (BLAS semantics)
    for (auto& x : c) x = std::nan("");
  const std::vector<double> expected = reference(ta, tb, m, n, k, alpha, a, std::max<std::int64_t>(lda, 1), b,
                                                 std::max<std::int64_t>(ldb, 1), beta, c, ldc);
  gemm(ta, tb, m, n, k, static_cast<T>(alpha), a.data(), std::max<std::int64_t>(lda, 1), b.data(),
       std::max<std::int64_t>(ldb, 1), static_cast<T>(beta), c.data(), std::max<std::int64_t>(ldc, 1));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double got = static_cast<double>(c[static_cast<std::size_t>(i * ldc + j)]),
                   want = expected[static_cast<std::size_t>(i * ldc + j)];
      RC_ASSERT(std::abs(got - want) <= tolerance * (1.0 + std::abs(want)));
    }
}

}  // namespace

TEST_CASE("float32 GEMM (oneDNN) matches the reference for every transpose, stride, alpha and beta") {
  rc::prop("float32", [] { check_gemm<float>(1e-5); });
}

TEST_CASE("float64 GEMM (Eigen) matches the reference for every transpose, stride, alpha and beta") {
  rc::prop("float64", [] { check_gemm<double>(1e-12); });
}

TEST_CASE("the backends are named") {
  CHECK(std::string(tapegrad::kernels::gemm_backend(false)).rfind("oneDNN", 0) == 0);
  CHECK(std::string(tapegrad::kernels::gemm_backend(true)).rfind("Eigen", 0) == 0);
}
