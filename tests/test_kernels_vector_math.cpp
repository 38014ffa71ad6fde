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
