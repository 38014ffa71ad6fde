// docs/testing.md's example: a layer with its own running statistic, tested with the kit. Built against the
// installed package by .ci/run (this folder's CMakeLists.txt), and inside tapegrad's suite by
// tests/test_docs_testing.cpp, which also checks that the page quotes the code between the DOC markers.
#include <tapegrad/tapegrad.h>
#include <tapegrad/testing.h>

// DOC-BEGIN
using namespace tapegrad;

/// y = gain * x / sqrt(running_power + 1e-5), running_power a moving average of each feature's mean square that
/// training-mode forwards update outside the graph, as BatchNorm updates running_var.
class PowerNorm : public nn::Module {
 public:
  explicit PowerNorm(std::int64_t features) : Module("PowerNorm") {
    gain = register_parameter("gain", ones({features}));
    running_power = register_buffer("running_power", ones({features}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = gain * x / sqrt(running_power + 1e-5);
    if (is_training()) {
      NoGradGuard no_grad;  // a statistic: never recorded, never differentiated
      running_power.copy_(0.9 * running_power + 0.1 * mean(square(x), {0}));
    }
    return y;
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<PowerNorm>(gain.numel())); }
  Tensor gain, running_power;
};

TEST_CASE("PowerNorm: gradients, buffer rules, and what each forward computes") {
  auto features = std::make_shared<std::int64_t>();  // drawn by the factory, read by the input generator
  const testing::ModuleFactory make = [features] {
    *features = *rc::gen::inRange<std::int64_t>(1, 5).as("features");
    return std::make_shared<PowerNorm>(*features);
  };
  const auto shapes = rc::gen::exec([features] { return Shape{*rc::gen::inRange(1, 6).as("batch"), *features}; });
  // The reference: what one forward computes, in plain tensor code, from the module's state before it.
  const auto step = [](const nn::Module& m, const Tensor& x, bool training) {
    const Tensor power = m.buffer("running_power");
    testing::Expected out{m.parameter("gain") * x / sqrt(power + 1e-5)};
    if (training) out.statistics["running_power"] = 0.9 * power + 0.1 * mean(square(x), {0});
    return out;
  };
  testing::check_module_gradients(make, shapes, {.second_order = true});
  testing::check_buffer_invariance(make, shapes, {.statistics = {"running_power"},
                                                  .momentum = [](const nn::Module&) { return 0.1; },
                                                  .reference = step});
}
// DOC-END

// DOC-BEGIN broken
/// PowerNorm with the momentum convention inverted: 0.1 * running_power + 0.9 * batch. It touches exactly
/// the buffers the correct layer touches, the same way; only the values it computes are wrong.
class InvertedPowerNorm : public PowerNorm {
 public:
  using PowerNorm::PowerNorm;
  Tensor forward(const Tensor& x) override {
    Tensor y = gain * x / sqrt(running_power + 1e-5);
    if (is_training()) {
      NoGradGuard no_grad;
      running_power.copy_(0.1 * running_power + 0.9 * mean(square(x), {0}));
    }
    return y;
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<InvertedPowerNorm>(3)); }
};

TEST_CASE("the kit rejects InvertedPowerNorm, naming the rule and the bug") {
  const testing::ModuleFactory make = [] { return std::make_shared<InvertedPowerNorm>(3); };
  const Tensor x = randn({4, 3}, default_generator(), TensorOptions{}.with_dtype(DType::Float64));
  const testing::CheckResult result = testing::check_buffer_rule(
      testing::BufferRule::MomentumIsConvex, make, x,
      {.statistics = {"running_power"}, .momentum = [](const nn::Module&) { return 0.1; }});
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.message, Catch::Matchers::Contains("r = m: the momentum convention is inverted"));
  // Every buffer rule passes: only a value rule sees this bug.
  for (const testing::BufferRule rule : testing::all_buffer_rules())
    if (rule < testing::BufferRule::StatisticsChangeInTraining)
      CHECK(testing::check_buffer_rule(rule, make, x, {.statistics = {"running_power"}}));
}
// DOC-END broken
