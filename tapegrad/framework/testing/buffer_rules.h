#pragma once
/// The buffer rules a module must keep (the ones BatchNorm's design rests on), each checkable on one module
/// and one input without RapidCheck: check_buffer_rule returns ok or a message naming the rule and the buffer.
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/autograd/tape.h>
#include <tapegrad/framework/module.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/framework/testing/compare.h>
#include <tapegrad/framework/testing/module_gradients.h>

namespace tapegrad::testing {

/// One rule of check_buffer_invariance; rule_name() is what a failure message and the property are called.
enum class BufferRule {
  StateIsParametersAndBuffers,
  StatisticsAreBuffers,
  TrainingChangesOnlyStatistics,
  EvalChangesNothing,
  NoGradRecordsNothing,
  ForwardRecordsOnlyItsGraph,
  StatisticsIgnoreGradMode,
  BackwardWritesNoBuffer,
  LoadStateRestoresEverything,
  SaveLoadReproducesEval,
  FailedLoadChangesNothing,
  // Rules about values (value_rules.h): what a forward computes, not only what it touches.
  StatisticsChangeInTraining,
  EvalIsPerSample,
  MatchesReference,
  MomentumIsConvex,
};

/// Every rule, in the order check_buffer_invariance runs them.
inline const std::vector<BufferRule>& all_buffer_rules() {
  static const std::vector<BufferRule> rules{
      BufferRule::StateIsParametersAndBuffers, BufferRule::StatisticsAreBuffers,
      BufferRule::TrainingChangesOnlyStatistics, BufferRule::EvalChangesNothing,
      BufferRule::NoGradRecordsNothing, BufferRule::ForwardRecordsOnlyItsGraph,
      BufferRule::StatisticsIgnoreGradMode, BufferRule::BackwardWritesNoBuffer,
      BufferRule::LoadStateRestoresEverything, BufferRule::SaveLoadReproducesEval,
      BufferRule::FailedLoadChangesNothing, BufferRule::StatisticsChangeInTraining,
      BufferRule::EvalIsPerSample, BufferRule::MatchesReference, BufferRule::MomentumIsConvex};
  return rules;
}

/// The rule as a sentence: "an eval forward changes no buffer and no parameter".
inline const char* rule_name(BufferRule rule) {
  switch (rule) {
    case BufferRule::StateIsParametersAndBuffers: return "parameters and buffers are disjoint and together are state()";
    case BufferRule::StatisticsAreBuffers: return "declared statistics are registered buffers, never parameters";
    case BufferRule::TrainingChangesOnlyStatistics: return "a training forward changes only the declared statistics";
    case BufferRule::EvalChangesNothing: return "an eval forward changes no buffer and no parameter";
    case BufferRule::NoGradRecordsNothing: return "a forward under NoGradGuard records nothing";
    case BufferRule::ForwardRecordsOnlyItsGraph: return "a forward records nothing outside its output's graph";
    case BufferRule::StatisticsIgnoreGradMode: return "statistics update the same with and without grad mode";
    case BufferRule::BackwardWritesNoBuffer: return "backward writes no buffer and gives no buffer a gradient";
    case BufferRule::LoadStateRestoresEverything: return "load_state restores every parameter and buffer";
    case BufferRule::SaveLoadReproducesEval: return "a save/load round trip reproduces eval outputs bit for bit";
    case BufferRule::FailedLoadChangesNothing: return "a failed load_state leaves the module unchanged";
    case BufferRule::StatisticsChangeInTraining: return "every declared statistic changes in a training forward";
    case BufferRule::EvalIsPerSample:
      return "each sample's eval output is the same in its batch, alone and in a permuted batch";
    case BufferRule::MatchesReference: return "a forward computes what the reference says, in training and eval";
    case BufferRule::MomentumIsConvex: return "one training step moves each statistic by momentum * (batch - running)";
  }
  return "unknown rule";
}

/// What one forward should produce, as the user's reference computes it in plain tensor code.
struct Expected {
  /// The forward's output.
  Tensor output;
  /// The new value of each buffer the forward changes, by name (matched as in `statistics`); every buffer not
  /// named here must keep its value.
  std::map<std::string, Tensor> statistics{};
};

/// The reference: from the module in its state before the forward (read its parameters and buffers, e.g. with
/// module.buffer("running_mean"); change nothing), the input and the mode, what the forward should produce.
using ReferenceFunction = std::function<Expected(const nn::Module& module, const Tensor& input, bool training)>;

/// What check_buffer_invariance needs to know about the module.
struct BufferInvarianceOptions {
  /// Buffers a training forward may change (running statistics), by name; "running_mean" also matches
  /// "1.running_mean" in a child. Every other buffer, and every parameter, must keep its value in a forward;
  /// each name must match a registered buffer, and each of them must change in a training forward.
  std::vector<std::string> statistics{};
  /// When the statistics depend on options the factory drew (BatchNorm without track_running_stats has none):
  /// called with each case's module, its result replaces `statistics` for that case.
  std::function<std::vector<std::string>(const nn::Module&)> statistics_of{};
  /// The momentum m of a case's module (nullopt: none), for the rule that one training step moves each
  /// floating-point statistic (or each of `momentum_statistics`) by exactly m * (batch - running).
  std::function<std::optional<double>(const nn::Module&)> momentum{};
  std::vector<std::string> momentum_statistics{};
  /// What one forward should compute (output and new statistics), checked in training and eval mode.
  ReferenceFunction reference{};
  /// Tolerances of the value rules: |actual - expected| <= atol + rtol * |expected|.
  double rtol = 1e-10;
  double atol = 1e-12;
  /// Each sample's eval output (along dimension 0) must not depend on the rest of its batch; unset means on
  /// for each case whose module has a declared floating-point statistic (a layer with running statistics).
  std::optional<bool> per_sample_eval{};
  /// Buffers registered as non-persistent (not part of state() by design), by name as for `statistics`.
  std::vector<std::string> non_persistent{};
  /// False for a module that is only run in eval mode: the rules then skip training-mode forwards.
  bool train_mode = true;
  /// Prefix of the property names, to tell apart several checks in one TEST_CASE.
  std::string label{};
};

/// A statistics_of for models drawn at random that may or may not hold a layer with these statistics (a stack
/// with or without BatchNorm, BatchNorm with or without running statistics): declares each of `names` that some
/// buffer of the module has, as itself or as the last part of a dotted name.
inline std::function<std::vector<std::string>(const nn::Module&)> statistics_present(std::vector<std::string> names) {
  return [names = std::move(names)](const nn::Module& module) {
    std::vector<std::string> out;
    const nn::NamedTensors buffers = module.named_buffers();
    for (const std::string& name : names)
      for (const auto& [buffer, tensor] : buffers)
        if (buffer == name || buffer.ends_with("." + name)) {
          out.push_back(name);
          break;
        }
    return out;
  };
}

namespace internal {

inline bool listed(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (name == n || name.ends_with("." + n)) return true;
  return false;
}

/// The statistics declared for this module: statistics_of(module) when set, else `statistics`.
inline std::vector<std::string> declared(const nn::Module& module, const BufferInvarianceOptions& o) {
  return o.statistics_of ? o.statistics_of(module) : o.statistics;
}

/// The modes a rule runs forwards in: training then eval, or eval only.
inline std::vector<bool> modes(const BufferInvarianceOptions& o) {
  return o.train_mode ? std::vector<bool>{true, false} : std::vector<bool>{false};
}

inline CheckResult broken(BufferRule rule, const std::string& what) {
  return {false, fmt::format("rule '{}' broken: {}", rule_name(rule), what)};
}

/// Where `now` first differs from `before`: "buffer 'running_mean'" and identical()'s message.
struct Change {
  std::string what;
  std::string detail;
};

/// The first entry of `now` whose bits differ from `before` (same order); nullopt when none does.
inline std::optional<Change> first_change(const nn::NamedTensors& now, const std::vector<Tensor>& before,
                                          const char* kind) {
  for (std::size_t i = 0; i < now.size(); ++i)
    if (CheckResult c = identical(now[i].second, before[i]); !c)
      return Change{fmt::format("{} '{}'", kind, now[i].first), c.message};
  return std::nullopt;
}

/// Runs the module twice in training mode (when it trains), so its statistics hold something other than their
/// initial values. A floating input is first moved (x / 2 + 1/4, which keeps positive values positive): a
/// cumulative average of the checked input itself would already be a fixed point of the next update.
inline void warm_up(nn::Module& module, const Tensor& input, const BufferInvarianceOptions& options) {
  if (!options.train_mode) return;
  NoGradGuard no_grad;
  module.train();
  const Tensor other = is_floating(input.dtype()) ? input * 0.5 + 0.25 : input;
  for (int i = 0; i < 2; ++i) module(other);
}

/// The module under test: made, converted to the input's floating dtype, and warmed up when `warm`.
inline std::shared_ptr<nn::Module> prepared(const ModuleFactory& make, const Tensor& input,
                                            const BufferInvarianceOptions& options, bool warm) {
  std::shared_ptr<nn::Module> module = make();
  if (is_floating(input.dtype())) module->to(input.dtype());
  if (warm) warm_up(*module, input, options);
  return module;
}

/// A second module of the same case: clone() when the module implements it, else a fresh one from `make`
/// (which must then build the same architecture) loaded with the first one's state.
inline std::shared_ptr<nn::Module> twin(const nn::Module& module, const ModuleFactory& make) {
  try {
    return module.clone();
  } catch (const Error&) {
    std::shared_ptr<nn::Module> fresh = make();
    const nn::NamedTensors state = module.state();
    if (!state.empty()) fresh->to(state.front().second.dtype());
    fresh->load_state(state);
    fresh->train(module.is_training());
    return fresh;
  }
}

/// The input with requires_grad set when it is floating, so a forward records what it would in training.
inline Tensor tracked(const Tensor& input) {
  Tensor x = input.detach().clone();
  if (is_floating(x.dtype())) x.requires_grad_(true);
  return x;
}

/// `state` with every value moved (floating + 0.5, integer + 1): a valid state that differs from the module's.
inline nn::NamedTensors shifted(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state) {
    if (is_floating(t.dtype())) {
      out.emplace_back(name, t.detach() + 0.5);
      continue;
    }
    const auto* data = t.data<std::int64_t>();
    std::vector<std::int64_t> values(data, data + t.numel());
    for (std::int64_t& v : values) ++v;
    out.emplace_back(name, from_vector(values, t.shape()));
  }
  return out;
}

inline std::vector<bool> training_flags(nn::Module& module) {
  std::vector<bool> out;
  for (auto& [prefix, m] : module.named_modules()) out.push_back(m->is_training());
  return out;
}

inline std::vector<bool> requires_grad_flags(const nn::Module& module) {
  std::vector<bool> out;
  for (const auto& [name, p] : module.named_parameters()) out.push_back(p.requires_grad());
  return out;
}

}  // namespace internal

}  // namespace tapegrad::testing
