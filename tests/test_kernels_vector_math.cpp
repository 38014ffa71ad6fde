// The kernels layer's vector sigmoid and tanh (the recurrent layers' gates): distance in ulps from the double
// result over a sample of every float32 bit pattern (each sign, binade and the subnormals), the special values
// (±0, ±inf, NaN, the largest and smallest floats) and the points where the kernels switch method or clamp;
// in place and at every length around the vector width. Under scripts/portability.sh this runs the AVX2 and the
// SSE4.2 clones; natively, the best one of this CPU.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <tapegrad/framework/kernels/vector_math.h>
#include "support/properties.h"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// The bound the kernels promise (vector_math.h). The largest measured over all 2^32 floats is in docs/sequence.md.
constexpr double kMaxUlps = 3.0;

double sigmoid_reference(float x) { return 1.0 / (1.0 + std::exp(-static_cast<double>(x))); }
double tanh_reference(float x) { return std::tanh(static_cast<double>(x)); }

// |got - reference| in units of the float spacing at the reference (subnormal spacing below FLT_MIN).
double ulps(float got, double reference) {
  if (std::isnan(reference)) return std::isnan(got) ? 0.0 : kInf;
  if (std::isinf(reference)) return got == reference ? 0.0 : kInf;
  const double magnitude = std::fabs(reference);
  const int exponent = magnitude < std::numeric_limits<float>::min() ? -126 : std::ilogb(magnitude);
  return std::fabs(static_cast<double>(got) - reference) / std::ldexp(1.0, exponent - 23);
}

// Special values and the points where the kernels change regime (tanh's clamp at |x| = 10, sigmoid's exp
// reaching the subnormals near -87.3 and 0 at -104, the range reduction's first steps at ±ln 2 / 2).
std::vector<float> special_values() {
  std::vector<float> v{0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                       std::numeric_limits<float>::denorm_min(), 1e-30f, 1e-8f, 0.3465736f, 0.3465737f, 1.0f,
                       9.0f, 9.01f, 10.0f, 10.0001f, 20.0f, 87.33f, 88.72f, 89.0f, 103.9f, 104.0f, 104.1f, 1e4f};
  const std::size_t n = v.size();
  for (std::size_t k = 0; k < n; ++k) v.push_back(-v[k]);
  return v;
}

// Every `stride`-th float32 bit pattern (stride odd and prime, so every low-bit residue is visited over the
// sweep), then the specials and a dense grid of [-12, 12] where the gates live.
std::vector<float> sample(std::uint32_t stride) {
  std::vector<float> v;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += stride)
    v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  for (float s : special_values()) v.push_back(s);
  for (int k = -120000; k <= 120000; ++k) v.push_back(static_cast<float>(k) * 1e-4f);
  return v;
}

template <class Kernel, class Reference>
double max_ulps(Kernel kernel, Reference reference, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  kernel(static_cast<std::int64_t>(x.size()), x.data(), y.data());
  double worst = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double e = ulps(y[k], reference(x[k]));
    if (e > worst) {
      worst = e;
      INFO("x = " << x[k] << " got " << y[k] << " expected " << reference(x[k]));
      CHECK(e <= kMaxUlps);
    }
  }
  return worst;
}

void sigmoid32(std::int64_t n, const float* x, float* y) { tapegrad::kernels::sigmoid(n, x, y); }
void tanh32(std::int64_t n, const float* x, float* y) { tapegrad::kernels::tanh(n, x, y); }

}  // namespace

TEST_CASE("float32 sigmoid and tanh stay within 3 ulp over a sample of all floats") {
  const std::vector<float> x = sample(65521);
  const double sigmoid_worst = max_ulps(sigmoid32, sigmoid_reference, x);
  const double tanh_worst = max_ulps(tanh32, tanh_reference, x);
  CHECK(sigmoid_worst <= kMaxUlps);
  CHECK(tanh_worst <= kMaxUlps);
  // Not vacuous: the sweep must reach where the methods differ from the reference in the last bit.
  CHECK(sigmoid_worst > 0);
  CHECK(tanh_worst > 0);
}

TEST_CASE("float32 sigmoid and tanh: exact values at the ends") {
  const std::vector<float> x{0.0f, -0.0f, kInf, -kInf, 200.0f, -200.0f, 1e-40f, -1e-40f};
  std::vector<float> s(x.size()), t(x.size());
  tapegrad::kernels::sigmoid(static_cast<std::int64_t>(x.size()), x.data(), s.data());
  tapegrad::kernels::tanh(static_cast<std::int64_t>(x.size()), x.data(), t.data());
  CHECK(s[0] == 0.5f);
  CHECK(s[1] == 0.5f);
  CHECK(s[2] == 1.0f);
  CHECK(s[3] == 0.0f);
  CHECK(s[4] == 1.0f);
  CHECK(s[5] == 0.0f);
  CHECK(s[6] == 0.5f);
  CHECK(t[0] == 0.0f);
  CHECK(!std::signbit(t[0]));
  CHECK(t[1] == 0.0f);
  CHECK(std::signbit(t[1]));  // tanh(-0) = -0, as PyTorch and libm give
  CHECK(t[2] == 1.0f);
  CHECK(t[3] == -1.0f);
  CHECK(t[4] == 1.0f);
  CHECK(t[5] == -1.0f);
  CHECK(t[6] == 1e-40f);  // a subnormal passes through, not flushed to 0
  CHECK(t[7] == -1e-40f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out = 0;
  tapegrad::kernels::sigmoid(1, &nan, &out);
  CHECK(std::isnan(out));
  tapegrad::kernels::tanh(1, &nan, &out);
  CHECK(std::isnan(out));
}

TEST_CASE("float32 sigmoid and tanh: every length around the vector width, and in place") {
  for (std::int64_t n = 0; n <= 70; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n) + 1), y(x.size(), -7.0f);
    for (std::int64_t k = 0; k < n; ++k) x[static_cast<std::size_t>(k)] = static_cast<float>(k - 35) * 0.37f;
    tapegrad::kernels::tanh(n, x.data(), y.data());
    CHECK(y[static_cast<std::size_t>(n)] == -7.0f);  // nothing written past n
    std::vector<float> in_place = x;
    tapegrad::kernels::tanh(n, in_place.data(), in_place.data());
    for (std::int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(k);
      CHECK(ulps(y[i], tanh_reference(x[i])) <= kMaxUlps);
      CHECK(in_place[i] == y[i]);
    }
    tapegrad::kernels::sigmoid(n, x.data(), y.data());
    CHECK(y[static_cast<std::size_t>(n)] == -7.0f);
    in_place = x;
    tapegrad::kernels::sigmoid(n, in_place.data(), in_place.data());
    for (std::int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(k);
      CHECK(ulps(y[i], sigmoid_reference(x[i])) <= kMaxUlps);
      CHECK(in_place[i] == y[i]);
    }
  }
}

TEST_CASE("float64 sigmoid and tanh are libm's") {
  const std::vector<double> x{-800.0, -30.0, -1.5, -1e-300, 0.0, 0.25, 3.0, 40.0, 800.0};
  std::vector<double> s(x.size()), t(x.size());
  tapegrad::kernels::sigmoid(static_cast<std::int64_t>(x.size()), x.data(), s.data());
  tapegrad::kernels::tanh(static_cast<std::int64_t>(x.size()), x.data(), t.data());
  for (std::size_t k = 0; k < x.size(); ++k) {
    CHECK(s[k] == 1.0 / (1.0 + std::exp(-x[k])));
    CHECK(t[k] == std::tanh(x[k]));
  }
}

TEST_CASE("fused LSTM cell row: float32 within a few ulp of the float64 formulas, float64 exactly them") {
  for (const std::int64_t h : {1, 7, 16, 37, 256}) {
    for (const bool with_bias : {true, false}) {
      const auto n4 = static_cast<std::size_t>(4 * h), n = static_cast<std::size_t>(h);
      std::vector<double> x(n4), hidden(n4), bias(n4), c_prev(n), d_u(n), d_cell(n);
      for (std::size_t k = 0; k < n4; ++k) {  // pre-activations over about [-9, 9], cells over about [-4, 4]
        x[k] = std::sin(0.7 * static_cast<double>(k) + 1.0) * 4.0;
        hidden[k] = std::cos(1.3 * static_cast<double>(k)) * 3.0;
        bias[k] = std::sin(2.1 * static_cast<double>(k)) * 2.0;
      }
      for (std::size_t j = 0; j < n; ++j) {
        c_prev[j] = std::cos(0.37 * static_cast<double>(j)) * 3.0;
        d_u[j] = std::sin(0.91 * static_cast<double>(j));
        d_cell[j] = std::cos(0.23 * static_cast<double>(j));
      }
      auto as_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
      const std::vector<float> xf = as_float(x), hf = as_float(hidden), bf = as_float(bias), cpf = as_float(c_prev),
                               duf = as_float(d_u);
      std::vector<float> gates(n4), c(n), tc(n), u(n), d_cell_f = as_float(d_cell), d_gates(n4);
      tapegrad::kernels::lstm_cell_forward(h, xf.data(), hf.data(), with_bias ? bf.data() : nullptr, gates.data(),
                                           cpf.data(), c.data(), tc.data(), u.data());
      tapegrad::kernels::lstm_cell_backward(h, gates.data(), cpf.data(), tc.data(), duf.data(), d_cell_f.data(),
                                            d_gates.data());
      std::vector<double> g64(n4), c64(n), tc64(n), u64(n), d_cell64 = d_cell, dg64(n4);
      tapegrad::kernels::lstm_cell_forward(h, x.data(), hidden.data(), with_bias ? bias.data() : nullptr, g64.data(),
                                           c_prev.data(), c64.data(), tc64.data(), u64.data());
      tapegrad::kernels::lstm_cell_backward(h, g64.data(), c_prev.data(), tc64.data(), d_u.data(), d_cell64.data(),
                                            dg64.data());
      for (std::size_t j = 0; j < n; ++j) {
        // float64: the scalar formulas, in the same order.
        double pre[4];
        for (std::size_t q = 0; q < 4; ++q)
          pre[q] = x[q * n + j] + hidden[q * n + j] + (with_bias ? bias[q * n + j] : 0.0);
        auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
        const double i = sig(pre[0]), f = sig(pre[1]), g = std::tanh(pre[2]), o = sig(pre[3]);
        const double cell = f * c_prev[j] + i * g, t = std::tanh(cell);
        CHECK(g64[j] == i);
        CHECK(g64[3 * n + j] == o);
        CHECK(c64[j] == cell);
        CHECK(u64[j] == o * t);
        const double dc = d_cell[j] + d_u[j] * o * (1 - t * t);
        CHECK(dg64[n + j] == dc * c_prev[j] * f * (1 - f));
        CHECK(d_cell64[j] == dc * f);
        // float32: PyTorch's float32 tolerance (rtol 1.3e-6, atol 1e-5) with a margin for the float inputs.
        for (std::size_t q = 0; q < 4; ++q) {
          CHECK(std::fabs(gates[q * n + j] - g64[q * n + j]) <= 1e-5 + 1.3e-6 * std::fabs(g64[q * n + j]));
          CHECK(std::fabs(d_gates[q * n + j] - dg64[q * n + j]) <= 1e-5 + 1.3e-6 * std::fabs(dg64[q * n + j]));
        }
        CHECK(std::fabs(c[j] - cell) <= 1e-5 + 1.3e-6 * std::fabs(cell));
        CHECK(std::fabs(tc[j] - t) <= 1e-5 + 1.3e-6 * std::fabs(t));
        CHECK(std::fabs(u[j] - o * t) <= 1e-5 + 1.3e-6 * std::fabs(o * t));
        CHECK(std::fabs(d_cell_f[j] - dc * f) <= 1e-5 + 1.3e-6 * std::fabs(dc * f));
      }
    }
  }
}
