// sigmoid and tanh over float32 arrays without libm: one exp-type polynomial, written so that GCC vectorises the
// whole function body (no table lookups, no branches, integer tricks through bit_cast) in each dispatched clone.
// Note: a 2-layer LSTM(256) training step at batch 128 spent about a third of its time in glibc's scalar tanhf
// and expf (2026-12 profile); the vector loops here take about 1 ns per element or less.
#include <tapegrad/framework/kernels/vector_math.h>

#include <bit>
#include <cmath>
#include <limits>

#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

constexpr float kLog2e = 0x1.715476p+0f;
// ln 2 = kLn2Hi + kLn2Lo with kLn2Hi's 15 significant bits, so that j * kLn2Hi is exact for |j| < 2^9
// (Cody and Waite's reduction, exact enough without an FMA, which the x86-64-v2 baseline lacks).
constexpr float kLn2Hi = 0x1.62e4p-1f;
constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
// Adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer and leaves that integer in the low bits.
constexpr float kShift = 0x1.8p23f;

// expm1(r) for |r| <= ln 2 / 2 (plus rounding slack): Taylor's series to r^7, whose truncation error there is
// below 2e-8 relative, a third of a float ulp; r + r^2 * p keeps full relative accuracy for tiny r.
[[gnu::always_inline]] inline float expm1_reduced(float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  return r + r * r * p;
}

// 2^i for -126 <= i <= 127, built in the exponent field. Note: the shift is done unsigned so that a NaN's
// meaningless i (its result is discarded by the NaN already in the product) is not undefined behaviour.
[[gnu::always_inline]] inline float pow2(std::int32_t i) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(i + 127) << 23);
}

// y = j ln 2 + r with j an integer and |r| <= ln 2 / 2; returns r and sets j.
[[gnu::always_inline]] inline float reduce(float y, std::int32_t& j) {
  const float z = y * kLog2e + kShift;
  const float jf = z - kShift;
  j = std::bit_cast<std::int32_t>(z) - std::bit_cast<std::int32_t>(kShift);
  return (y - jf * kLn2Hi) - jf * kLn2Lo;
}

// |x| clamped to at most `limit` (a positive float), as bits; NaN comes out as `limit`, so callers put it back.
// Note: the clamps and selects are integer operations on the bits. A float comparison may raise the invalid
// exception on NaN, and under -ftrapping-math (GCC's default) GCC then refuses to if-convert, so the x86-64-v2
// clone was left scalar.
[[gnu::always_inline]] inline float clamped_magnitude(std::int32_t bits, float limit) {
  const std::int32_t magnitude = bits & 0x7fffffff, top = std::bit_cast<std::int32_t>(limit);
  return std::bit_cast<float>(magnitude > top ? top : magnitude);
}

// `result`, or a quiet NaN where `bits` is a NaN. Note: by bits again, not a select between floats, which GCC
// would turn back into a branch around the division that computes `result`.
[[gnu::always_inline]] inline float nan_where_nan(std::int32_t bits, float result) {
  const std::int32_t nan_mask = -static_cast<std::int32_t>((bits & 0x7fffffff) > 0x7f800000);
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(result) | (nan_mask & 0x7fc00000));
}

// exp(-a) for 0 <= a <= 104. Note: below exp(-104) the result rounds to 0 anyway; the scale 2^j (j >= -150) is
// applied as two normal factors, so a result in the subnormal range is rounded once, not flushed.
[[gnu::always_inline]] inline float exp_negative(float a) {
  std::int32_t j;
  const float r = reduce(-a, j);
  const std::int32_t half = j >> 1;
  return (1.0f + expm1_reduced(r)) * pow2(half) * pow2(j - half);
}

// Note: exp(-|x|) never overflows; sigmoid(x) = e / (1 + e) for x < 0 keeps the relative accuracy of tiny results.
[[gnu::always_inline]] inline float sigmoid_one(float x) {
  const auto bits = std::bit_cast<std::int32_t>(x);
  const float e = exp_negative(clamped_magnitude(bits, 104.0f));
  const float numerator = bits < 0 ? e : 1.0f;  // sigmoid(-0) = 1 / 2 either way
  return nan_where_nan(bits, numerator / (1.0f + e));
}

// tanh(|x|) = -q / (q + 2) with q = expm1(-2|x|) in (-1, 0]: no cancellation anywhere, and tanh(x) = x for
// tiny x. From |x| = 10 on, tanh rounds to 1, so |x| is clamped there (j >= -29: 2^j stays normal).
[[gnu::always_inline]] inline float tanh_one(float x) {
  const auto bits = std::bit_cast<std::int32_t>(x);
  std::int32_t j;
  const float r = reduce(-2.0f * clamped_magnitude(bits, 10.0f), j);
  const float scale = pow2(j);
  const float q = expm1_reduced(r) * scale + (scale - 1.0f);  // expm1(y) = 2^j expm1(r) + (2^j - 1)
  // Note: & clears the sign of -q / (q + 2), which is -0 for x = 0.
  const std::int32_t magnitude = std::bit_cast<std::int32_t>(-q / (q + 2.0f)) & 0x7fffffff;
  return nan_where_nan(bits, std::bit_cast<float>(magnitude | (bits & std::numeric_limits<std::int32_t>::min())));
}

struct Libm {
  static double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
  static double tanh(double v) { return std::tanh(v); }
};
struct Own {
  static float sigmoid(float v) { return sigmoid_one(v); }
  static float tanh(float v) { return tanh_one(v); }
};

// Note: the operations keep the order of the scalar loop this replaced, so float64 results did not move.
template <class F, class T>
[[gnu::always_inline]] inline void lstm_forward_body(std::int64_t h, const T* x, const T* hidden, const T* bias,
                                                     T* gates, const T* c_prev, T* c, T* c_tanh, T* u) {
#pragma omp simd
  for (std::int64_t j = 0; j < h; ++j) {
    T pre[4];
    for (int q = 0; q < 4; ++q) pre[q] = x[q * h + j] + hidden[q * h + j] + (bias ? bias[q * h + j] : T(0));
    const T i = F::sigmoid(pre[0]), f = F::sigmoid(pre[1]), g = F::tanh(pre[2]), o = F::sigmoid(pre[3]);
    gates[j] = i, gates[h + j] = f, gates[2 * h + j] = g, gates[3 * h + j] = o;
    const T cell = f * c_prev[j] + i * g;
    const T tc = F::tanh(cell);
    c[j] = cell, c_tanh[j] = tc, u[j] = o * tc;
  }
}

template <class T>
[[gnu::always_inline]] inline void lstm_backward_body(std::int64_t h, const T* gates, const T* c_prev,
                                                      const T* c_tanh, const T* d_u, T* d_cell, T* d_gates) {
#pragma omp simd
  for (std::int64_t j = 0; j < h; ++j) {
    const T i = gates[j], f = gates[h + j], g = gates[2 * h + j], o = gates[3 * h + j], tc = c_tanh[j];
    const T dc = d_cell[j] + d_u[j] * o * (T(1) - tc * tc);
    d_gates[j] = dc * g * i * (T(1) - i);
    d_gates[h + j] = dc * c_prev[j] * f * (T(1) - f);
    d_gates[2 * h + j] = dc * i * (T(1) - g * g);
    d_gates[3 * h + j] = d_u[j] * tc * o * (T(1) - o);
    d_cell[j] = dc * f;
  }
}

}  // namespace

TAPEGRAD_DISPATCH
void sigmoid(std::int64_t n, const float* x, float* y) {
#pragma omp simd
  for (std::int64_t k = 0; k < n; ++k) y[k] = sigmoid_one(x[k]);
}

TAPEGRAD_DISPATCH
void tanh(std::int64_t n, const float* x, float* y) {
#pragma omp simd
  for (std::int64_t k = 0; k < n; ++k) y[k] = tanh_one(x[k]);
}

// float64 keeps libm: its recurrent layers are for gradient checks and 1e-10 agreement with PyTorch, not speed.
void sigmoid(std::int64_t n, const double* x, double* y) {
  for (std::int64_t k = 0; k < n; ++k) y[k] = 1.0 / (1.0 + std::exp(-x[k]));
}

void tanh(std::int64_t n, const double* x, double* y) {
  for (std::int64_t k = 0; k < n; ++k) y[k] = std::tanh(x[k]);
}

// Note: a null bias gets its own instantiation, so that the loop has no test per element.
TAPEGRAD_DISPATCH
void lstm_cell_forward(std::int64_t h, const float* x, const float* hidden, const float* bias, float* gates,
                       const float* c_prev, float* c, float* c_tanh, float* u) {
  if (bias) lstm_forward_body<Own>(h, x, hidden, bias, gates, c_prev, c, c_tanh, u);
  else lstm_forward_body<Own>(h, x, hidden, static_cast<const float*>(nullptr), gates, c_prev, c, c_tanh, u);
}

void lstm_cell_forward(std::int64_t h, const double* x, const double* hidden, const double* bias, double* gates,
                       const double* c_prev, double* c, double* c_tanh, double* u) {
  lstm_forward_body<Libm>(h, x, hidden, bias, gates, c_prev, c, c_tanh, u);
}

TAPEGRAD_DISPATCH
void lstm_cell_backward(std::int64_t h, const float* gates, const float* c_prev, const float* c_tanh,
                        const float* d_u, float* d_cell, float* d_gates) {
  lstm_backward_body(h, gates, c_prev, c_tanh, d_u, d_cell, d_gates);
}

void lstm_cell_backward(std::int64_t h, const double* gates, const double* c_prev, const double* c_tanh,
                        const double* d_u, double* d_cell, double* d_gates) {
  lstm_backward_body(h, gates, c_prev, c_tanh, d_u, d_cell, d_gates);
}

}  // namespace tapegrad::kernels
