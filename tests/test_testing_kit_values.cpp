// The kit's value rules checked against broken layers: the mutants of a running-statistics layer that touch the
// right buffers but compute the wrong values (issue 40), and a statistic kept as a plain member, must each be
// rejected by the rule they break, with a message that points at the bug; the correct layer passes every rule.
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
  EmaTwice,                 // the EMA update applied twice per forward
  InvertedMomentum,         // running = m * running + (1 - m) * batch
  CountNeverIncremented,    // num_batches_tracked stays 0
  EvalFromBatchMean,        // eval output centred on the batch's mean, not the running one
  OutputFromStaleRunning,   // training output centred on running_mean read before the update
  PlainMember,              // running_mean a plain member, never registered
};

constexpr double momentum = 0.1;

/// Training: y = (x - mean(x, 0)) * scale, running_mean <- (1 - m) * running_mean + m * mean(x, 0) outside the
/// graph, num_batches_tracked += 1. Eval: y = (x - running_mean) * scale.
class RunningCenter : public nn::Module {
 public:
  RunningCenter(std::int64_t features, Bug bug) : Module("RunningCenter"), features_(features), bug_(bug) {
    scale = register_parameter("scale", full({features}, 1.5));
    running_mean = bug == Bug::PlainMember ? zeros({features}) : register_buffer("running_mean", zeros({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions{}.with_dtype(DType::Int64)));
  }

  Tensor forward(const Tensor& x) override {
    if (!is_training()) return (x - (bug_ == Bug::EvalFromBatchMean ? mean(x, {0}) : running_mean)) * scale;
    const Tensor y = (x - (bug_ == Bug::OutputFromStaleRunning ? running_mean : mean(x, {0}))) * scale;
    NoGradGuard no_grad;
    const Tensor batch = mean(x, {0});
    const double keep = bug_ == Bug::InvertedMomentum ? momentum : 1 - momentum;
    for (int i = 0; i < (bug_ == Bug::EmaTwice ? 2 : 1); ++i) running_mean.copy_(keep * running_mean + (1 - keep) * batch);
    if (bug_ != Bug::CountNeverIncremented) num_batches_tracked.add_(1.0);
    return y;
  }

  std::shared_ptr<nn::Module> clone() const override {
    auto copy = std::make_shared<RunningCenter>(features_, bug_);
    if (bug_ == Bug::PlainMember) copy->running_mean = running_mean.clone();
    return clone_into(copy);
  }

  Tensor scale, running_mean, num_batches_tracked;

 private:
  std::int64_t features_;
  Bug bug_;
};

/// What one step of the correct layer computes, in plain tensor code.
testing::Expected reference(const nn::Module& module, const Tensor& x, bool training) {
  const Tensor scale = module.parameter("scale"), running = module.buffer("running_mean");
  if (!training) return {(x - running) * scale};
  const Tensor batch = mean(x, {0});
  return {(x - batch) * scale,
          {{"running_mean", (1 - momentum) * running + momentum * batch},
           {"num_batches_tracked", full({}, module.buffer("num_batches_tracked").item() + 1)}}};
}

testing::BufferInvarianceOptions rules() {
  return {.statistics = {"running_mean", "num_batches_tracked"},
          .momentum = [](const nn::Module&) { return momentum; },
          .momentum_statistics = {"running_mean"},
          .reference = reference};
}

testing::ModuleFactory make(Bug bug, std::int64_t features = 3) {
  return [bug, features] { return std::make_shared<RunningCenter>(features, bug); };
}

Tensor input(std::uint64_t seed) {
  Generator g(seed);
  return randn({4, 3}, g, TensorOptions{}.with_dtype(DType::Float64));
}

// The rule rejects the mutant on each of a few inputs, its message naming the rule and containing every `part`.
void require_rejected(Bug bug, BufferRule rule, const std::vector<std::string>& parts) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(bug), input(seed), rules());
    INFO(result.message);
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.message, Contains(std::string("rule '") + testing::rule_name(rule) + "' broken"));
    for (const std::string& part : parts) CHECK_THAT(result.message, Contains(part));
  }
}

}  // namespace

TEST_CASE("the correct running-statistics layer passes every rule, value rules included") {
  for (const BufferRule rule : testing::all_buffer_rules()) {
    CHECK(testing::rule_applies(rule, rules()));
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(Bug::None), input(1), rules());
    INFO(testing::rule_name(rule) << ": " << result.message);
    CHECK(result.ok);
  }
  // Over random batch sizes and feature counts: the factory draws the features, the input generator reads them.
  auto features = std::make_shared<std::int64_t>(0);
  const testing::ModuleFactory drawn = [features] {
    *features = *rc::gen::inRange<std::int64_t>(1, 4).as("features");
    return std::make_shared<RunningCenter>(*features, Bug::None);
  };
  const auto shapes = rc::gen::exec([features] { return Shape{*rc::gen::inRange<std::int64_t>(1, 6), *features}; });
  testing::check_buffer_invariance(drawn, shapes, rules());
}

TEST_CASE("an EMA applied twice per forward is rejected by the reference and the momentum rule") {
  require_rejected(Bug::EmaTwice, BufferRule::MatchesReference,
                   {"after a training forward on an input of shape [4, 3], statistic 'running_mean' differs from the "
                    "reference's new value"});
  require_rejected(Bug::EmaTwice, BufferRule::MomentumIsConvex,
                   {"statistic 'running_mean' with momentum 0.1", "r = 0.81",
                    "r = (1 - m)^2: the update is applied twice per forward"});
}

TEST_CASE("an inverted momentum is rejected by the reference and the momentum rule") {
  require_rejected(Bug::InvertedMomentum, BufferRule::MatchesReference, {"statistic 'running_mean' differs"});
  require_rejected(Bug::InvertedMomentum, BufferRule::MomentumIsConvex,
                   {"r = 0.1,", "r = m: the momentum convention is inverted"});
}

TEST_CASE("a count never incremented is rejected: the statistic does not change, and the reference disagrees") {
  require_rejected(Bug::CountNeverIncremented, BufferRule::StatisticsChangeInTraining,
                   {"statistic 'num_batches_tracked' kept its value (0) through a training forward"});
  require_rejected(Bug::CountNeverIncremented, BufferRule::MatchesReference,
                   {"statistic 'num_batches_tracked' differs from the reference's new value", "0 vs 1", "before the forward it held 0"});
}

TEST_CASE("an eval output computed from the batch mean is rejected: eval is not per sample") {
  require_rejected(Bug::EvalFromBatchMean, BufferRule::EvalIsPerSample,
                   {"sample 0's eval output alone differs from its output in the batch of 4",
                    "is the eval output computed from the batch's statistics"});
  require_rejected(Bug::EvalFromBatchMean, BufferRule::MatchesReference,
                   {"an eval forward's output on an input of shape [4, 3] differs from the reference's"});
}

TEST_CASE("a training output centred on the running mean read before the update is rejected by the reference") {
  require_rejected(Bug::OutputFromStaleRunning, BufferRule::MatchesReference,
                   {"a training forward's output on an input of shape [4, 3] differs from the reference's"});
}

TEST_CASE("a statistic kept as a plain member is rejected by every rule, naming it and register_buffer") {
  for (const BufferRule rule : testing::all_buffer_rules()) {
    const testing::CheckResult result = testing::check_buffer_rule(rule, make(Bug::PlainMember), input(1), rules());
    INFO(testing::rule_name(rule));
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.message, Contains("rule 'declared statistics are registered buffers, never parameters' broken: "
                                        "statistic 'running_mean' is declared but no registered buffer has that "
                                        "name (the module's buffers: 'num_batches_tracked')"));
    CHECK_THAT(result.message, Contains("register it with register_buffer"));
  }
}

TEST_CASE("the reference must not change the module, and may name only buffers") {
  testing::BufferInvarianceOptions o = rules();
  o.reference = [](const nn::Module& module, const Tensor& x, bool training) {
    testing::Expected e = reference(module, x, training);
    if (training) e.statistics["runing_mean"] = e.statistics["running_mean"];
    return e;
  };
  const testing::CheckResult result = testing::check_buffer_rule(BufferRule::MatchesReference, make(Bug::None), input(1), o);
  CHECK_THAT(result.message, Contains("the reference gives a new value for 'runing_mean', which is no buffer"));
}
