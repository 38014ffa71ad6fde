// The kernels layer's GEMM (oneDNN's sgemm or matmul primitive for float32, tapegrad's kernel for float64) and
// its Linear forward against a plain triple loop in double: every transpose combination, leading dimensions wider
// than the rows, alpha and beta, empty dims, each float32 path forced and the automatic rule; the primitive cache's
// bound and concurrent callers; float64 shapes that cross its packing blocks on every tile this CPU runs, the same
// bits at any thread count, and concurrent float64 callers.
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <tapegrad/framework/kernels/environment_path.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/kernels/gemm_f64.h>
#include <tapegrad/framework/parallel.h>
#include "support/properties.h"

using tapegrad::kernels::gemm;
using tapegrad::kernels::GemmPath;

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

// Values that are multiples of 1/16 in [-4, 4], so that float32 products are exact.
template <class T>
std::vector<T> grid_values(std::int64_t count) {
  std::vector<T> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = static_cast<T>(*rc::gen::inRange(-64, 65)) / T(16);
  return v;
}

template <class T>
void check_gemm(double tolerance, GemmPath path = GemmPath::automatic) {
  const bool ta = *rc::gen::arbitrary<bool>(), tb = *rc::gen::arbitrary<bool>();
  // Note: up to 40 rows, so that the automatic rule's switch to the primitive at 16 rows is crossed.
  const auto m = *rc::gen::inRange<std::int64_t>(0, 40), n = *rc::gen::inRange<std::int64_t>(0, 40),
             k = *rc::gen::inRange<std::int64_t>(0, 70);
  const auto pad = *rc::gen::inRange<std::int64_t>(0, 3);
  const double alpha = *rc::gen::element(1.0, -0.5, 2.0), beta = *rc::gen::element(0.0, 1.0, 0.25);
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  const std::vector<T> a = grid_values<T>(a_rows * lda), b = grid_values<T>(b_rows * ldb);
  std::vector<T> c = grid_values<T>(m * ldc);
  if (beta == 0.0)  // beta = 0 must ignore C, NaNs included (BLAS semantics)
    for (auto& x : c) x = std::nan("");
  const std::vector<double> expected = reference(ta, tb, m, n, k, alpha, a, std::max<std::int64_t>(lda, 1), b,
                                                 std::max<std::int64_t>(ldb, 1), beta, c, ldc);
  gemm(ta, tb, m, n, k, static_cast<T>(alpha), a.data(), std::max<std::int64_t>(lda, 1), b.data(),
       std::max<std::int64_t>(ldb, 1), static_cast<T>(beta), c.data(), std::max<std::int64_t>(ldc, 1), path);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double got = static_cast<double>(c[static_cast<std::size_t>(i * ldc + j)]),
                   want = expected[static_cast<std::size_t>(i * ldc + j)];
      RC_ASSERT(std::abs(got - want) <= tolerance * (1.0 + std::abs(want)));
    }
}

// y = x W^T + bias through kernels::linear against the reference, with and without a bias.
template <class T>
void check_linear(double tolerance, GemmPath path = GemmPath::automatic) {
  const auto rows = *rc::gen::inRange<std::int64_t>(0, 40), out = *rc::gen::inRange<std::int64_t>(0, 40),
             in = *rc::gen::inRange<std::int64_t>(0, 70);
  const bool with_bias = *rc::gen::arbitrary<bool>();
  const std::vector<T> x = grid_values<T>(rows * in), w = grid_values<T>(out * in), bias = grid_values<T>(out);
  std::vector<T> y(static_cast<std::size_t>(rows * out), static_cast<T>(std::nan("")));
  std::vector<T> broadcast(y.size(), T(0));
  if (with_bias)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < out; ++j) broadcast[static_cast<std::size_t>(r * out + j)] = bias[static_cast<std::size_t>(j)];
  const std::int64_t ld = std::max<std::int64_t>(in, 1);
  const std::vector<double> expected =
      reference(false, true, rows, out, in, 1.0, x, ld, w, ld, 1.0, broadcast, std::max<std::int64_t>(out, 1));
  tapegrad::kernels::linear(rows, out, in, x.data(), w.data(), with_bias ? bias.data() : nullptr, y.data(), path);
  for (std::size_t i = 0; i < y.size(); ++i)
    RC_ASSERT(std::abs(static_cast<double>(y[i]) - expected[i]) <= tolerance * (1.0 + std::abs(expected[i])));
}

}  // namespace

TEST_CASE("float32 GEMM (oneDNN) matches the reference for every transpose, stride, alpha and beta") {
  rc::prop("automatic path", [] { check_gemm<float>(1e-5); });
  rc::prop("sgemm", [] { check_gemm<float>(1e-5, GemmPath::sgemm); });
  rc::prop("matmul primitive", [] { check_gemm<float>(1e-5, GemmPath::matmul_primitive); });
}

TEST_CASE("the Linear forward kernel matches the reference with and without a bias, on every path") {
  rc::prop("float32, automatic path", [] { check_linear<float>(1e-5); });
  rc::prop("float32, sgemm", [] { check_linear<float>(1e-5, GemmPath::sgemm); });
  rc::prop("float32, matmul primitive", [] { check_linear<float>(1e-5, GemmPath::matmul_primitive); });
  rc::prop("float64", [] { check_linear<double>(1e-12); });
}

TEST_CASE("the matmul primitive cache is bounded and recomputes evicted shapes correctly") {
  const std::size_t capacity = tapegrad::kernels::gemm_cache_capacity();
  REQUIRE(capacity > 0);
  REQUIRE(capacity < 1000);  // small enough to overflow here
  const std::int64_t in = 8, out = 3;
  const std::vector<float> w = {1, -2, 3, 0.5f, 0, 1, -1, 2, 4, 1, 0, -3, 2, 2, 1, 0, -1, 0.25f, 1, 1, 1, 1, 1, 1};
  const auto run = [&](std::int64_t rows) {  // each row count is a shape of its own
    std::vector<float> x(static_cast<std::size_t>(rows * in)), y(static_cast<std::size_t>(rows * out));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    tapegrad::kernels::linear(rows, out, in, x.data(), w.data(), nullptr, y.data(), GemmPath::matmul_primitive);
    return y;
  };
  const std::vector<float> first = run(1);
  for (std::int64_t rows = 2; rows <= static_cast<std::int64_t>(capacity) + 8; ++rows) {
    run(rows);
    CHECK(tapegrad::kernels::gemm_cache_size() <= capacity);
  }
  CHECK(tapegrad::kernels::gemm_cache_size() == capacity);
  // The first shape was evicted (least recently used); it is built again and gives the same values.
  CHECK(run(1) == first);
  CHECK(tapegrad::kernels::gemm_cache_size() == capacity);
}

TEST_CASE("concurrent callers share the matmul primitives safely") {
  const std::int64_t rows = 64, out = 48, in = 96;
  std::vector<float> x(static_cast<std::size_t>(rows * in)), w(static_cast<std::size_t>(out * in)), bias(out);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11) / 4.0f - 1.0f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) / 8.0f - 0.75f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i) / 16.0f;
  std::vector<float> expected(static_cast<std::size_t>(rows * out));
  tapegrad::kernels::linear(rows, out, in, x.data(), w.data(), bias.data(), expected.data(), GemmPath::sgemm);
  std::vector<std::vector<float>> results(4, std::vector<float>(expected.size()));
  std::vector<std::thread> threads;
  for (auto& result : results)
    threads.emplace_back([&] {
      for (int repeat = 0; repeat < 20; ++repeat)
        tapegrad::kernels::linear(rows, out, in, x.data(), w.data(), bias.data(), result.data(),
                                  GemmPath::matmul_primitive);
    });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results)
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(result[i] == Approx(expected[i]).margin(1e-4));
}

TEST_CASE("float64 GEMM (tapegrad's kernel) matches the reference for every transpose, stride, alpha and beta") {
  rc::prop("float64", [] { check_gemm<double>(1e-12); });
}

// Note: the property above stays inside one packed block (k < 384, m and n < 40). These shapes cross the blocks
// of depth (384), of rows (128 at most, a multiple of the tile's rows) and of columns (2048 at most), and leave
// partial tiles at every edge. Grid values keep the products and sums exact, so any order gives the same bits.
// Multiples of 1/16 in [-4, 4] in a fixed pseudo-random order.
std::vector<double> fixed_grid(std::int64_t count, std::uint32_t seed) {
  std::vector<double> v(static_cast<std::size_t>(count));
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<double>(static_cast<int>(seed >> 16) % 129 - 64) / 16.0;
  }
  return v;
}

// Every tile this CPU runs (all three on an AVX-512 machine in the default build; under qemu, or in a build without
// dispatch, fewer), called by name.
TEST_CASE("float64 GEMM matches the reference on shapes that cross its packing blocks, on every tile") {
  struct Shape {
    std::int64_t m, n, k;
  };
  const std::vector<std::string> kernels = tapegrad::kernels::gemm_f64_kernels();
  REQUIRE(!kernels.empty());
  CHECK(kernels.front() == tapegrad::kernels::gemm_f64_kernel());
  for (const std::string& kernel : kernels)
    for (const Shape shape : {Shape{130, 21, 400}, Shape{9, 2060, 19}, Shape{257, 33, 513}, Shape{1, 1, 600}})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const auto [m, n, k] = shape;
          const std::int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
          const std::vector<double> a = fixed_grid((ta ? k : m) * lda, 1), b = fixed_grid((tb ? n : k) * ldb, 2);
          std::vector<double> c(static_cast<std::size_t>(m * ldc), 0.5);
          const std::vector<double> expected = reference(ta, tb, m, n, k, -0.5, a, lda, b, ldb, 1.0, c, ldc);
          tapegrad::kernels::gemm_f64_on(kernel, ta, tb, m, n, k, -0.5, a.data(), lda, b.data(), ldb, c.data(), ldc);
          INFO(kernel << ": m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb);
          CHECK(c == expected);
        }
  CHECK_THROWS_WITH(tapegrad::kernels::gemm_f64_on("AVX-1024 1x1", false, false, 1, 1, 1, 1.0, nullptr, 1, nullptr,
                                                   1, nullptr, 1),
                    "gemm_f64_on: no float64 kernel 'AVX-1024 1x1' on this CPU and build");
}

TEST_CASE("float64 GEMM gives the same bits on one thread and on two, on every tile") {
  const int original = tapegrad::get_num_threads();
  const std::int64_t m = 300, n = 200, k = 700;  // above the size from which threads share a product
  std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  // Note: values that round, unlike the grid above, so that a change in the order of the sums would show.
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * static_cast<double>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11 * static_cast<double>(i));
  for (const std::string& kernel : tapegrad::kernels::gemm_f64_kernels()) {
    std::vector<double> one(static_cast<std::size_t>(m * n), 0.0), two(one.size(), 0.0);
    tapegrad::set_num_threads(1);
    tapegrad::kernels::gemm_f64_on(kernel, false, true, m, n, k, 1.0, a.data(), k, b.data(), k, one.data(), n);
    tapegrad::set_num_threads(2);
    tapegrad::kernels::gemm_f64_on(kernel, false, true, m, n, k, 1.0, a.data(), k, b.data(), k, two.data(), n);
    INFO(kernel);
    CHECK(one == two);
  }
  tapegrad::set_num_threads(original);
}

// Note: the float64 kernel packs into per-thread buffers; callers on other threads, each with its own operands,
// must not see each other's panels.
TEST_CASE("concurrent float64 products each get their own result") {
  const std::int64_t m = 96, n = 64, k = 400;
  std::vector<std::vector<double>> as, bs, expected, results;
  for (std::uint32_t t = 0; t < 4; ++t) {
    as.push_back(fixed_grid(m * k, 10 + t));
    bs.push_back(fixed_grid(k * n, 20 + t));
    results.emplace_back(static_cast<std::size_t>(m * n), 0.0);
    expected.push_back(reference(false, false, m, n, k, 1.0, as.back(), k, bs.back(), n, 0.0, results.back(), n));
  }
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat)
        gemm(false, false, m, n, k, 1.0, as[t].data(), k, bs[t].data(), n, 0.0, results[t].data(), n);
    });
  for (auto& thread : threads) thread.join();
  for (std::size_t t = 0; t < 4; ++t) CHECK(results[t] == expected[t]);
}

TEST_CASE("the backends are named") {
  CHECK(std::string(tapegrad::kernels::gemm_backend(false)).rfind("oneDNN", 0) == 0);
  const std::string f64 = tapegrad::kernels::gemm_backend(true), kernel = tapegrad::kernels::gemm_f64_kernel();
  CHECK(f64 == "tapegrad " + kernel);
  CHECK((kernel == "AVX-512 8x24" || kernel == "AVX2 6x8" || kernel == "SSE2 4x4"));
}

// The reader behind TAPEGRAD_GEMM_PATH and TAPEGRAD_CONV_PATH (those two are read once per process, so the test
// drives the shared reader through a variable of its own).
TEST_CASE("a kernel path forced from the environment is read, defaulted, and rejected by name") {
  enum class Path { automatic, first, second };
  const char* variable = "TAPEGRAD_TEST_KERNEL_PATH";
  auto read = [&] {
    return tapegrad::kernels::path_from_environment(variable, Path::automatic,
                                                    {{"first", Path::first}, {"second", Path::second}});
  };
  ::unsetenv(variable);
  CHECK(read() == Path::automatic);
  ::setenv(variable, "", 1);
  CHECK(read() == Path::automatic);
  ::setenv(variable, "second", 1);
  CHECK(read() == Path::second);
  ::setenv(variable, "bogus", 1);
  CHECK_THROWS_WITH(read(), "TAPEGRAD_TEST_KERNEL_PATH must be first or second (or unset), got 'bogus'");
  ::unsetenv(variable);
}
