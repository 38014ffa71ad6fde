// BatchNorm's batch statistics keep their accuracy when the values sit far from zero: the per-channel
// variance is accumulated from deviations, so a large common offset does not cancel it away.
#include <catch2/catch.hpp>
#include <cmath>

#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

// [N, C, H, W] float64 values offset + scale * noise, and the same noise in float64 for the exact answer.
struct Case {
  Tensor input, noise;
};

Case offset_case(double offset, double scale, std::uint64_t seed) {
  Generator generator(seed);
  Tensor noise = randn({4, 3, 5, 6}, generator, TensorOptions{}.with_dtype(DType::Float64));
  return {noise * scale + offset, noise};
}

}  // namespace

TEST_CASE("batch_norm_train's variance of values offset by 1e6 matches the variance of the bare noise") {
  for (const double scale : {1.0, 1e-3}) {
    const Case c = offset_case(1e6, scale, 7);
    const auto result = batch_norm_train(c.input, Tensor(), Tensor(), 0.0);
    const auto expected = var(c.noise, {0, 2, 3}, 0).to_vector();
    const auto got = result.var.to_vector();
    const auto mean = result.mean.to_vector();
    const auto expected_mean = tapegrad::mean(c.noise, {0, 2, 3}).to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) {
      // float64 holds 1e6 + noise to ~1e-10 absolute, so the variance is good to ~1e-9 relative of scale^2.
      CHECK(std::abs(got[i] - expected[i] * scale * scale) <= 1e-6 * scale * scale);
      CHECK(std::abs(mean[i] - (1e6 + expected_mean[i] * scale)) <= 1e-6);
    }
  }
}

TEST_CASE("batch_norm_train on float32 values offset by 1e4 still normalizes to unit variance") {
  const Case c = offset_case(1e4, 1.0, 11);
  const Tensor output = batch_norm_train(c.input.to(DType::Float32), Tensor(), Tensor(), 0.0).output;
  const auto variance = var(output.to(DType::Float64), {0, 2, 3}, 0).to_vector();
  // float32 rounds 1e4 + noise to ~5e-4, so the normalized variance is 1 to ~1e-3.
  for (double v : variance) CHECK(std::abs(v - 1.0) < 1e-2);
}
