// Initialisers: exact fans and gains, bounds, and the spread of many samples.
#include <cmath>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};
Stats stats_of(const Tensor& t) {
  const auto v = t.to_vector();
  Stats s{0, 0, v[0], v[0]};
  for (double x : v) {
    s.mean += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}
}  // namespace

TEST_CASE("fans follow PyTorch, including the receptive field") {
  CHECK(init::calculate_fan_in_and_fan_out(zeros({10, 784})) == std::pair<std::int64_t, std::int64_t>{784, 10});
  CHECK(init::calculate_fan_in_and_fan_out(zeros({16, 3, 5, 5})) == std::pair<std::int64_t, std::int64_t>{75, 400});
  CHECK(init::calculate_fan_in_and_fan_out(zeros({4, 2, 3})) == std::pair<std::int64_t, std::int64_t>{6, 12});
  CHECK_THROWS_WITH(init::calculate_fan_in_and_fan_out(zeros({5})),
                    Catch::Contains("fewer than 2 dimensions") && Catch::Contains("[5]"));
}

TEST_CASE("gains match torch.nn.init.calculate_gain") {
  CHECK(init::calculate_gain("linear") == 1.0);
  CHECK(init::calculate_gain("conv2d") == 1.0);
  CHECK(init::calculate_gain("sigmoid") == 1.0);
  CHECK(init::calculate_gain("tanh") == 5.0 / 3.0);
  CHECK(init::calculate_gain("relu") == std::sqrt(2.0));
  CHECK(init::calculate_gain("selu") == 0.75);
  CHECK(init::calculate_gain("leaky_relu") == std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
  CHECK_THROWS_WITH(init::calculate_gain("swish"), "calculate_gain: unsupported nonlinearity 'swish'");
}

TEST_CASE("kaiming_uniform stays within its bound and fills it") {
  Generator g(7);
  Tensor w = zeros({64, 100});
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU, g);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 100.0);
  const Stats s = stats_of(w);
  CHECK(s.max <= bound);
  CHECK(s.min >= -bound);
  CHECK(s.max > 0.98 * bound);
  CHECK(s.min < -0.98 * bound);
  CHECK(s.std == Approx(bound / std::sqrt(3.0)).epsilon(0.03));
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU, g);
  CHECK(stats_of(w).max <= std::sqrt(2.0) * std::sqrt(3.0 / 64.0));
  CHECK(stats_of(w).max > std::sqrt(2.0) * std::sqrt(3.0 / 100.0));  // wider than the fan_in bound
}

TEST_CASE("kaiming_normal, xavier_normal and xavier_uniform have the right spread") {
  Generator g(11);
  Tensor w = zeros({200, 300}, TensorOptions{}.with_dtype(DType::Float64));
  init::kaiming_normal_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU, g);
  CHECK(stats_of(w).std == Approx(std::sqrt(2.0 / 300.0)).epsilon(0.01));
  CHECK(std::abs(stats_of(w).mean) < 0.001);
  init::xavier_normal_(w, 2.0, g);
  CHECK(stats_of(w).std == Approx(2.0 * std::sqrt(2.0 / 500.0)).epsilon(0.01));
  init::xavier_uniform_(w, 1.0, g);
  const double a = std::sqrt(6.0 / 500.0);
  CHECK(stats_of(w).max <= a);
  CHECK(stats_of(w).min >= -a);
  CHECK(stats_of(w).std == Approx(std::sqrt(2.0 / 500.0)).epsilon(0.01));
}

TEST_CASE("uniform, normal, constant write in place into parameters that require grad") {
  Tensor p = zeros({1000}).requires_grad_();
  const Tensor alias = p;
  const auto records_before = tape_size();
  Generator g(3);
  init::uniform_(p, 2.0, 3.0, g);
  CHECK(stats_of(alias).min >= 2.0);
  CHECK(stats_of(alias).max < 3.0);
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
  init::normal_(p, 5.0, 0.5, g);
  CHECK(stats_of(alias).mean == Approx(5.0).epsilon(0.01));
  CHECK(stats_of(alias).std == Approx(0.5).epsilon(0.1));
  init::constant_(p, 1.5);
  CHECK(stats_of(alias).min == 1.5);
  init::zeros_(p);
  CHECK(stats_of(alias).max == 0.0);
  init::ones_(p);
  CHECK(stats_of(alias).min == 1.0);
  CHECK(tape_size() == records_before);
}

TEST_CASE("the same seed gives the same initialisation") {
  Generator a(42), b(42);
  Tensor x = zeros({5, 5}), y = zeros({5, 5});
  init::xavier_uniform_(x, 1.0, a);
  init::xavier_uniform_(y, 1.0, b);
  CHECK(x.to_vector() == y.to_vector());
  init::xavier_uniform_(y, 1.0, b);
  CHECK(x.to_vector() != y.to_vector());
}

TEST_CASE("initialisers reject integer tensors") {
  Tensor i = zeros({2, 2}, TensorOptions{}.with_dtype(DType::Int64));
  CHECK_THROWS_WITH(init::uniform_(i), "uniform_: expected a float32 or float64 tensor, got int64");
}
