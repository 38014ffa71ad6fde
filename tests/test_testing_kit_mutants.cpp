// The kit checked against broken layers: each deliberately broken version of one small layer with a running
// statistic must be rejected by the rule it breaks, with the rule and the tensor named, while the correct
// version passes every rule. If the kit stops catching a mutant, these tests fail.
#include <memory>
#include <string>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using Catch::Matchers::Contains;
using testing::BufferRule;

namespace {

enum class Bug {
  None,
  StatisticAsParameter,   // the running mean registered as a parameter
  UpdatesInEval,          // the running mean also updated in eval mode
  UpdatesInGraph,         // the running mean updated with grad mode on
  StatisticBeforeGuard,   // the batch mean taken with grad mode on, then the update under NoGradGuard
  BackwardWritesBuffer,   // a backward closure that writes the running mean
  LoadNotAllOrNothing,    // validation in after_load_state, after the values were copied in
  WrongScaleGradient,     // the gradient of `scale` off by a factor of 2
};

/// y = x * scale over [N, 3], keeping an exponential moving average of the batch mean and a count of updates.
class RunningMean : public nn::Module {
 public:
  explicit RunningMean(Bug bug) : Module("RunningMean"), bug_(bug) {
    scale = register_parameter("scale", full({3}, 1.5));
    running_mean = bug == Bug::StatisticAsParameter ? register_parameter("running_mean", zeros({3}), false)
                                                    : register_buffer("running_mean", zeros({3}));
    count = register_buffer("count", zeros({}, TensorOptions{}.with_dtype(DType::Int64)));
  }

  Tensor forward(const Tensor& x) override {
    Tensor y = bug_ == Bug::WrongScaleGradient ? wrong_scale(x) : x * scale;
    if (bug_ == Bug::BackwardWritesBuffer && should_record({y})) y = spy(y);
    if (is_training() || bug_ == Bug::UpdatesInEval) {
      const Tensor batch = bug_ == Bug::StatisticBeforeGuard ? mean(x, {0}) : Tensor();
      GradModeGuard grad_mode(bug_ == Bug::UpdatesInGraph && is_grad_enabled());
      running_mean.copy_(running_mean * 0.9 + (batch.defined() ? batch : mean(x, {0})) * 0.1);
      count.add_(1.0);
    }
    return y;
  }

  std::shared_ptr<nn::Module> clone() const override { return clone_into(std::make_shared<RunningMean>(bug_)); }

  Tensor scale, running_mean, count;

 protected:
  void after_load_state() override {
    if (bug_ == Bug::LoadNotAllOrNothing && count.item() < 0) fail("RunningMean: count {} < 0", count.item());
  }

 private:
  Tensor wrong_scale(const Tensor& x) const {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = x * scale;
    }
    if (!should_record({x, scale})) return out;
    return record_op("wrong_scale", out, {x, scale}, [x = x.detach(), s = scale.detach()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{g * s, sum_to(g * x, s.shape()) * 2.0};
    });
  }

  Tensor spy(const Tensor& y) {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = y.clone();
    }
    return record_op("spy", out, {y}, [buffer = running_mean](const Tensor& g, NeedsGrad) {
      NoGradGuard no_grad;
      Tensor written = buffer;
      written.copy_(mean(g, {0}));
      return std::vector<Tensor>{g};
    });
  }

  Bug bug_;
};

testing::ModuleFactory make(Bug bug) {
  return [bug] { return std::make_shared<RunningMean>(bug); };
}

const testing::BufferInvarianceOptions rules{.statistics = {"running_mean", "count"}};

Tensor input(std::uint64_t seed) {
  Generator g(seed);
  return randn({4, 3}, g, TensorOptions{}.with_dtype(DType::Float64));
}

// The rule must reject the mutant on every one of a few inputs, naming the rule and `culprit`.
void require_rejected(Bug bug, BufferRule rule, const std::string& culprit) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(bug), input(seed), rules);
    INFO(result.message);
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.message, Contains(std::string("rule '") + testing::rule_name(rule) + "' broken"));
    CHECK_THAT(result.message, Contains(culprit));
  }
}

}  // namespace

TEST_CASE("the correct layer passes every buffer rule and the gradient check") {
  for (const BufferRule rule : testing::all_buffer_rules()) {
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(Bug::None), input(1), rules);
    INFO(testing::rule_name(rule) << ": " << result.message);
    CHECK(result.ok);
  }
  testing::check_buffer_invariance(make(Bug::None), rc::gen::just(Shape{4, 3}), rules);
  testing::check_module_gradients(make(Bug::None), rc::gen::just(Shape{4, 3}));
}

TEST_CASE("a statistic registered as a parameter is rejected, by every rule") {
  require_rejected(Bug::StatisticAsParameter, BufferRule::StatisticsAreBuffers,
                   "statistic 'running_mean' is registered as a parameter");
  // Note: every rule checks the declared statistics first, so each reports the cause, not a symptom.
  for (const BufferRule rule : testing::all_buffer_rules()) {
    if (!testing::rule_applies(rule, rules)) continue;
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(Bug::StatisticAsParameter), input(1), rules);
    CHECK_THAT(result.message, Contains("statistic 'running_mean' is registered as a parameter"));
  }
}

TEST_CASE("a running statistic updated in eval mode is rejected") {
  require_rejected(Bug::UpdatesInEval, BufferRule::EvalChangesNothing, "buffer 'running_mean' changed in an eval");
}

TEST_CASE("a running statistic updated inside the graph is rejected") {
  // Note: tapegrad's copy_ may itself refuse a buffer write whose operand requires grad; either way the
  // message tells the user to write the update under NoGradGuard.
  require_rejected(Bug::UpdatesInGraph, BufferRule::ForwardRecordsOnlyItsGraph, "NoGradGuard");
}

TEST_CASE("a statistic computed with grad mode on, before the guard, is rejected with that cause") {
  // The dead records are named: mean(x, {0}) is sum_to, reshape and div on the tape.
  require_rejected(Bug::StatisticBeforeGuard, BufferRule::ForwardRecordsOnlyItsGraph,
                   "operations whose results neither the output nor anything else alive uses, so no gradient can "
                   "reach them (sum_to, reshape, div): no buffer requires grad, so the update itself is not "
                   "recorded: a value computed with grad mode on feeds it");
}

TEST_CASE("a backward that writes a buffer is rejected") {
  require_rejected(Bug::BackwardWritesBuffer, BufferRule::BackwardWritesNoBuffer,
                   "buffer 'running_mean' changed during backward");
}

TEST_CASE("a load_state that is not all-or-nothing is rejected") {
  require_rejected(Bug::LoadNotAllOrNothing, BufferRule::FailedLoadChangesNothing,
                   "NaN and -1 values threw (RunningMean: count -1 < 0) but entry 'scale' changed");
}

TEST_CASE("a wrong gradient for one parameter is rejected, naming the parameter") {
  for (const bool training : {true, false}) {
    RunningMean layer(Bug::WrongScaleGradient);
    layer.to(DType::Float64);
    const GradcheckResult result = testing::module_gradient_check(layer, input(7), training);
    INFO(result.message);
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.message, Contains(std::string(training ? "training" : "eval") +
                                        " mode, gradient with respect to parameter 'scale' [3]"));
    CHECK_THAT(result.message, Contains("; worst element "));
  }
  RunningMean correct(Bug::None);
  correct.to(DType::Float64);
  CHECK(testing::module_gradient_check(correct, input(7), true).ok);
}

TEST_CASE("allclose and identical name the worst element") {
  const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);
  const Tensor a = tensor({1, 2, 3, 4}, {2, 2}, f64), b = tensor({1, 2.5, 3, 4.001}, {2, 2}, f64);
  const testing::CheckResult close = testing::allclose(a, b);
  CHECK_FALSE(close.ok);
  CHECK(close.message == "allclose: 2 of 4 elements differ; worst is element 1 [0, 1]: 2 vs 2.5 (|diff| 0.5 > atol "
                         "1e-12 + rtol 1e-10 * 2.5)");
  CHECK(testing::allclose(a, b, 0.0, 0.6));
  CHECK(testing::identical(a, b).message ==
        "identical: 2 of 4 elements differ in their bits; largest difference at element 1 [0, 1]: 2 vs 2.5");
  CHECK(testing::identical(a, a.clone()));
  CHECK(testing::identical(a, a.to(DType::Float32)).message == "identical: dtypes differ, float64 vs float32");
  CHECK(testing::allclose(a, zeros({4})).message == "allclose: shapes differ, [2, 2] vs [4]");
  const Tensor nan = full({2}, NAN, f64);
  CHECK(testing::identical(nan, nan.clone()));  // bitwise: the same NaN is identical, unlike ==
}
