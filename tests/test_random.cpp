// Seeded randomness that reproduces everywhere: golden values pin the first draws of every distribution
// for a given seed, so a change of algorithm, or a standard library whose <random> distributions differ,
// shows up here instead of as a silently different model.
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <vector>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
TensorOptions float64() { return TensorOptions{}.with_dtype(DType::Float64); }
}  // namespace

TEST_CASE("the engine's first draws for seed 42 are the standard's mt19937_64 sequence") {
  Generator g(42);
  // Note: std::mt19937_64's sequence is fixed by the standard ([rand.eng.mers]); these are its first three.
  CHECK(g.next_bits() == 0xc151df7d6ee5e2d6u);
  CHECK(g.next_bits() == 0xa3978fb9b92502a8u);
  CHECK(g.next_bits() == 0xc08c967f0e5e7b0au);
}

TEST_CASE("uniform draws are the top 53 (double) or 24 (float) bits of one engine draw") {
  Generator g(42), f(42);
  CHECK(g.uniform01() == 0x1.82a3befaddcbcp-1);
  CHECK(g.uniform01() == 0x1.472f1f73724ap-1);
  CHECK(g.uniform01() == 0x1.81192cfe1cbcfp-1);
  CHECK(f.uniform01_float() == 0x1.82a3bep-1f);
  CHECK(f.uniform01_float() == 0x1.472f1ep-1f);
  // the same rule, checked against raw bits for many draws
  Generator bits(9), u(9), uf(9);
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t b = bits.next_bits();
    REQUIRE(u.uniform01() == static_cast<double>(b >> 11) * 0x1.0p-53);
  }
  for (int i = 0; i < 100000; ++i) REQUIRE(uf.uniform01_float() < 1.0f);  // never rounds up to 1
}

TEST_CASE("standard_normal is Box-Muller on two uniform draws, pinned for seed 42") {
  Generator g(42), u(42);
  // Note: log, sqrt and cos come from the C library; glibc's are within an ulp, so these compare to 1e-15.
  const std::vector<double> golden{-0x1.13c1b5ffc24acp+0, 0x1.183273ea220c2p+0, 0x1.cb7388d1af94dp+0};
  for (double expected : golden) CHECK(g.standard_normal() == Approx(expected).epsilon(1e-15));
  for (int i = 0; i < 3; ++i) {
    const double u1 = u.uniform01(), u2 = u.uniform01();
    CHECK(golden[static_cast<std::size_t>(i)] ==
          Approx(std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2)).epsilon(1e-15));
  }
}

TEST_CASE("bounded integers are unbiased and pinned for seed 42") {
  Generator g(42);
  for (std::uint64_t expected : {6u, 4u, 0u, 2u, 1u}) CHECK(g.below(10) == expected);
  CHECK_THROWS_WITH(g.below(0), "Generator::below: bound must be positive");
  // every residue of 7 about equally often over 70,000 draws (expected 10,000 each, sd ~93)
  std::map<std::uint64_t, int> counts;
  Generator h(1);
  for (int i = 0; i < 70000; ++i) ++counts[h.below(7)];
  REQUIRE(counts.size() == 7);
  for (const auto& [value, count] : counts) CHECK(std::abs(count - 10000) < 500);
}

TEST_CASE("random tensor factories are pinned for seed 7") {
  Generator normal_gen(7), uniform_gen(7), integer_gen(7);
  const std::vector<double> randn64{0x1.9765fb74c31bep+0, 0x1.8e3ca64978f4bp-2, 0x1.09d0f5cde98a5p-1,
                                    0x1.88cb7c625b2adp+0};
  const auto drawn = randn({4}, normal_gen, float64()).to_vector();
  for (std::size_t i = 0; i < 4; ++i) CHECK(drawn[i] == Approx(randn64[i]).epsilon(1e-15));
  CHECK(rand({4}, uniform_gen).to_vector() ==
        std::vector<double>{0x1.823ecap-1, 0x1.e60acep-1, 0x1.e0edcp-4, 0x1.c8a8d8p-1});
  CHECK(randint(-5, 5, {6}, integer_gen).to_vector() == std::vector<double>{0, -5, 3, 1, -4, 3});
  Generator wide(1);
  const auto extremes = randint(INT64_MIN, INT64_MAX, {64}, wide);  // a width of 2^64 - 1: no overflow
  CHECK(extremes.numel() == 64);
}

TEST_CASE("manual_seed decides the default generator's draws") {
  manual_seed(3);
  const std::vector<double> first = randn({3}).to_vector();
  CHECK(first[0] == Approx(0x1.b5cb6ap-2).epsilon(1e-7));
  CHECK(first[1] == Approx(-0x1.85472p-1).epsilon(1e-7));
  CHECK(first[2] == Approx(-0x1.a63336p-1).epsilon(1e-7));
  manual_seed(3);
  CHECK(randn({3}).to_vector() == first);
}
