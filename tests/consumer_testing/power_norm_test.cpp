// docs/testing.md's example: a layer with its own running statistic, tested with the kit. Built against the
// installed package by .ci/run (this folder's CMakeLists.txt), and inside tapegrad's suite by
// tests/test_docs_testing.cpp, which also checks that the page quotes the code between the DOC markers.
#include <tapegrad/tapegrad.h>
#include <tapegrad/testing.h>

// DOC-BEGIN
using namespace tapegrad;

/// y = gain * x / sqrt(running_power + 1e-5): each feature scaled by a moving average of its mean square,
/// which training-mode forwards update outside the graph, as BatchNorm updates running_var.
class PowerNorm : public nn::Module {
 public:
  explicit PowerNorm(std::int64_t features) : Module("PowerNorm"), features_(features) {
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
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<PowerNorm>(features_)); }
  Tensor gain, running_power;

 private:
  std::int64_t features_;
};

TEST_CASE("PowerNorm has the right gradients and keeps every buffer rule") {
  const testing::ModuleFactory make = [] { return std::make_shared<PowerNorm>(3); };
  const auto shapes = rc::gen::map(rc::gen::inRange<std::int64_t>(1, 6), [](std::int64_t n) { return Shape{n, 3}; });
  testing::check_module_gradients(make, shapes, {.second_order = true});
  testing::check_buffer_invariance(make, shapes, {.statistics = {"running_power"}});
}
// DOC-END

// DOC-BEGIN broken
/// PowerNorm with the NoGradGuard forgotten: the update is recorded on the tape at every training step.
class LeakyPowerNorm : public PowerNorm {
 public:
  using PowerNorm::PowerNorm;
  Tensor forward(const Tensor& x) override {
    Tensor y = gain * x / sqrt(running_power + 1e-5);
    if (is_training()) running_power.copy_(0.9 * running_power + 0.1 * mean(square(x), {0}));
    return y;
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<LeakyPowerNorm>(3)); }
};

TEST_CASE("the kit rejects LeakyPowerNorm, naming the rule") {
  const testing::ModuleFactory make = [] { return std::make_shared<LeakyPowerNorm>(3); };
  const Tensor x = randn({4, 3}, default_generator(), TensorOptions{}.with_dtype(DType::Float64));
  const testing::CheckResult result = testing::check_buffer_rule(testing::BufferRule::ForwardRecordsOnlyItsGraph,
                                                                 make, x, {.statistics = {"running_power"}});
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.message, Catch::Matchers::StartsWith("rule 'a forward records nothing outside its output's "
                                                         "graph' broken: a training forward recorded"));
}
// DOC-END broken
