// BatchNorm's innermost loops: one generic body each, and a dispatched copy per element type (the clones
// of each vectorise the inlined body for AVX-512, AVX2 and the baseline).
//
// Note: this file is compiled with -ffp-contract=off (cmake/library.cmake). The backward of BatchNorm followed
// by ReLU recomputes ReLU's input (x - shift) * scale + offset instead of saving the output, and its mask is
// ReLU's only if every recomputation rounds as the forward did; with contraction, whether an expression becomes
// an FMA is the compiler's choice per loop and per clone. Without it every operation rounds once, in every
// clone, so the affine map also rounds alike on every CPU (the batch statistics feeding it are sums whose
// order follows the vector width, and may still differ in their last bits).
#include <tapegrad/framework/kernels/batch_norm_runs.h>

#include <algorithm>
#include <cmath>

#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

template <class T>
[[gnu::always_inline]] inline void shifted_moments_body(const T* p, std::int64_t n, double x0, double& sum_out,
                                                        double& squares_out) {
  double sum = 0, squares = 0;
#pragma omp simd reduction(+ : sum, squares)
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - x0;
    sum += d;
    squares += d * d;
  }
  sum_out += sum;
  squares_out += squares;
}

// ReLU's rule, v <= 0 gives 0 (so a NaN stays NaN), applied to the affine value before it is stored: the same
// bits as the affine pass followed by relu's own pass.
template <bool Relu, class T>
[[gnu::always_inline]] inline T maybe_relu(T v) {
  if constexpr (Relu) return v <= T(0) ? T(0) : v;
  return v;
}

// g where the forward's ReLU input (x - shift) * scale + offset is > 0 or NaN, else 0: relu's backward rule
// (detail::relu_backward) on a recomputed input. The expression is affine_body's, in the same file, without
// contraction, so it rounds as the forward did.
template <bool Relu, class T>
[[gnu::always_inline]] inline T relu_gradient(T g, T x, T shift, T scale, T offset) {
  if constexpr (Relu) return (x - shift) * scale + offset <= T(0) ? T(0) : g;
  return g;
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void affine_body(const T* p, T* q, std::int64_t n, T shift, T scale, T offset) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) q[i] = maybe_relu<Relu>((p[i] - shift) * scale + offset);
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_sums_body(const T* g, const T* x, std::int64_t n, double mean,
                                                  double& sum_g_out, double& sum_gxc_out, T shift = 0, T scale = 0,
                                                  T offset = 0) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (std::int64_t i = 0; i < n; ++i) {
    const double gv = static_cast<double>(relu_gradient<Relu>(g[i], x[i], shift, scale, offset));
    a += gv;
    b += gv * (static_cast<double>(x[i]) - mean);
  }
  sum_g_out += a;
  sum_gxc_out += b;
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_input_body(const T* g, const T* x, T* dx, std::int64_t n, T mean, T a, T b,
                                                   T d, T scale = 0, T offset = 0) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = a * relu_gradient<Relu>(g[i], x[i], mean, scale, offset) + b * (x[i] - mean) + d;
}

template <class T>
[[gnu::always_inline]] inline void accumulate_row_body(const T* row, std::int64_t width, double* acc) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(row[j]);
}

template <class T>
[[gnu::always_inline]] inline void squared_deviation_row_body(const T* row, std::int64_t width, const double* mean,
                                                              double* acc) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) {
    const double d = static_cast<double>(row[j]) - mean[j];
    acc[j] += d * d;
  }
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void affine_row_body(const T* p, T* q, std::int64_t width, const T* shift,
                                                   const T* scale, const T* offset) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) q[j] = maybe_relu<Relu>((p[j] - shift[j]) * scale[j] + offset[j]);
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_sums_row_body(const T* g, const T* x, std::int64_t width, const double* mean,
                                                      double* sum_g, double* sum_gxc, const T* shift = nullptr,
                                                      const T* scale = nullptr, const T* offset = nullptr) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) {
    T masked = g[j];
    if constexpr (Relu) masked = relu_gradient<true>(g[j], x[j], shift[j], scale[j], offset[j]);
    const double gv = static_cast<double>(masked);
    sum_g[j] += gv;
    sum_gxc[j] += gv * (static_cast<double>(x[j]) - mean[j]);
  }
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_input_row_body(const T* g, const T* x, T* dx, std::int64_t width,
                                                       const T* mean, const T* a, const T* b, const T* d,
                                                       const T* scale = nullptr, const T* offset = nullptr) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) {
    T gv = g[j];
    if constexpr (Relu) gv = relu_gradient<true>(g[j], x[j], mean[j], scale[j], offset[j]);
    dx[j] = a[j] * gv + b[j] * (x[j] - mean[j]) + d[j];
  }
}

}  // namespace

// One dispatched definition per element type; the macro keeps the two copies from drifting apart.
#define TAPEGRAD_BATCH_NORM_RUNS(T)                                                                               \
  TAPEGRAD_DISPATCH void shifted_moments(const T* p, std::int64_t n, double x0, double& sum, double& squares) {   \
    shifted_moments_body(p, n, x0, sum, squares);                                                                 \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void affine(const T* p, T* q, std::int64_t n, T shift, T scale, T offset) {                   \
    affine_body<false>(p, q, n, shift, scale, offset);                                                            \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void affine_relu(const T* p, T* q, std::int64_t n, T shift, T scale, T offset) {              \
    affine_body<true>(p, q, n, shift, scale, offset);                                                             \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_sums(const T* g, const T* x, std::int64_t n, double mean, double& sum_g,             \
                                   double& sum_gxc) {                                                             \
    grad_sums_body<false>(g, x, n, mean, sum_g, sum_gxc);                                                         \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_sums_relu(const T* g, const T* x, std::int64_t n, double mean, T shift, T scale,     \
                                        T offset, double& sum_g, double& sum_gxc) {                               \
    grad_sums_body<true>(g, x, n, mean, sum_g, sum_gxc, shift, scale, offset);                                    \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_input(const T* g, const T* x, T* dx, std::int64_t n, T mean, T a, T b, T d) {       \
    grad_input_body<false>(g, x, dx, n, mean, a, b, d);                                                           \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_input_relu(const T* g, const T* x, T* dx, std::int64_t n, T mean, T a, T b, T d,     \
                                         T scale, T offset) {                                                     \
    grad_input_body<true>(g, x, dx, n, mean, a, b, d, scale, offset);                                             \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void accumulate_row(const T* row, std::int64_t width, double* acc) {                          \
    accumulate_row_body(row, width, acc);                                                                         \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void accumulate_squared_deviation_row(const T* row, std::int64_t width, const double* mean,   \
                                                          double* acc) {                                          \
    squared_deviation_row_body(row, width, mean, acc);                                                            \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void affine_row(const T* p, T* q, std::int64_t width, const T* shift, const T* scale,         \
                                    const T* offset) {                                                            \
    affine_row_body<false>(p, q, width, shift, scale, offset);                                                    \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void affine_row_relu(const T* p, T* q, std::int64_t width, const T* shift, const T* scale,    \
                                         const T* offset) {                                                       \
    affine_row_body<true>(p, q, width, shift, scale, offset);                                                     \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_sums_row(const T* g, const T* x, std::int64_t width, const double* mean,            \
                                       double* sum_g, double* sum_gxc) {                                          \
    grad_sums_row_body<false>(g, x, width, mean, sum_g, sum_gxc);                                                 \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_sums_row_relu(const T* g, const T* x, std::int64_t width, const double* mean,        \
                                            const T* shift, const T* scale, const T* offset, double* sum_g,       \
                                            double* sum_gxc) {                                                    \
    grad_sums_row_body<true>(g, x, width, mean, sum_g, sum_gxc, shift, scale, offset);                            \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_input_row(const T* g, const T* x, T* dx, std::int64_t width, const T* mean,         \
                                        const T* a, const T* b, const T* d) {                                     \
    grad_input_row_body<false>(g, x, dx, width, mean, a, b, d);                                                   \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void grad_input_row_relu(const T* g, const T* x, T* dx, std::int64_t width, const T* mean,     \
                                             const T* a, const T* b, const T* d, const T* scale,                  \
                                             const T* offset) {                                                   \
    grad_input_row_body<true>(g, x, dx, width, mean, a, b, d, scale, offset);                                     \
  }

TAPEGRAD_BATCH_NORM_RUNS(float)
TAPEGRAD_BATCH_NORM_RUNS(double)

#undef TAPEGRAD_BATCH_NORM_RUNS

TAPEGRAD_DISPATCH void eval_coefficients(const double* var, const double* weight, double eps, std::int64_t channels,
                                         double* invstd, double* scale) {
#pragma omp simd
  for (std::int64_t c = 0; c < channels; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
  if (weight) {
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) scale[c] = invstd[c] * weight[c];
  } else {
    std::copy(invstd, invstd + channels, scale);
  }
}

}  // namespace tapegrad::kernels
