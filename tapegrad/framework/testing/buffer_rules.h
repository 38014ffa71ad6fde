#pragma once
/// The buffer rules a module must keep (the ones BatchNorm's design rests on), each checkable on one module
/// and one input without RapidCheck: check_buffer_rule returns ok or a message naming the rule and the buffer.
#include <exception>
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
};

/// Every rule, in the order check_buffer_invariance runs them.
inline const std::vector<BufferRule>& all_buffer_rules() {
  static const std::vector<BufferRule> rules{
      BufferRule::StateIsParametersAndBuffers, BufferRule::StatisticsAreBuffers,
      BufferRule::TrainingChangesOnlyStatistics, BufferRule::EvalChangesNothing,
      BufferRule::NoGradRecordsNothing, BufferRule::ForwardRecordsOnlyItsGraph,
      BufferRule::StatisticsIgnoreGradMode, BufferRule::BackwardWritesNoBuffer,
      BufferRule::LoadStateRestoresEverything, BufferRule::SaveLoadReproducesEval,
      BufferRule::FailedLoadChangesNothing};
  return rules;
}

/// The rule as a sentence: "an eval forward changes no buffer and no parameter".
inline const char* rule_name(BufferRule rule) {
  switch (rule) {
    case BufferRule::StateIsParametersAndBuffers: return "parameters and buffers are disjoint and together are state()";
    case BufferRule::StatisticsAreBuffers: return "declared statistics are buffers, never parameters";
    case BufferRule::TrainingChangesOnlyStatistics: return "a training forward changes only the declared statistics";
    case BufferRule::EvalChangesNothing: return "an eval forward changes no buffer and no parameter";
    case BufferRule::NoGradRecordsNothing: return "a forward under NoGradGuard records nothing";
    case BufferRule::ForwardRecordsOnlyItsGraph: return "a forward records nothing outside its output's graph";
    case BufferRule::StatisticsIgnoreGradMode: return "statistics update the same with and without grad mode";
    case BufferRule::BackwardWritesNoBuffer: return "backward writes no buffer and gives no buffer a gradient";
    case BufferRule::LoadStateRestoresEverything: return "load_state restores every parameter and buffer";
    case BufferRule::SaveLoadReproducesEval: return "a save/load round trip reproduces eval outputs bit for bit";
    case BufferRule::FailedLoadChangesNothing: return "a failed load_state leaves the module unchanged";
  }
  return "unknown rule";
}

/// What check_buffer_invariance needs to know about the module.
struct BufferInvarianceOptions {
  /// Buffers a training forward may change (running statistics), by name; "running_mean" also matches
  /// "1.running_mean" in a child. Every other buffer, and every parameter, must keep its value in a forward.
  std::vector<std::string> statistics{};
  /// Buffers registered as non-persistent (not part of state() by design), by name as for `statistics`.
  std::vector<std::string> non_persistent{};
  /// False for a module that is only run in eval mode: the rules then skip training-mode forwards.
  bool train_mode = true;
  /// Prefix of the property names, to tell apart several checks in one TEST_CASE.
  std::string label{};
};

namespace internal {

inline bool listed(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (name == n || name.ends_with("." + n)) return true;
  return false;
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

/// The module under test: made, converted to the input's floating dtype, and (when it trains) run twice in
/// training mode so its statistics hold something other than their initial values.
inline std::shared_ptr<nn::Module> prepared(const ModuleFactory& make, const Tensor& input,
                                            const BufferInvarianceOptions& options, bool warm) {
  std::shared_ptr<nn::Module> module = make();
  if (is_floating(input.dtype())) module->to(input.dtype());
  if (warm && options.train_mode) {
    NoGradGuard no_grad;
    module->train();
    for (int i = 0; i < 2; ++i) (*module)(input);
  }
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
