#pragma once
/// check_buffer_invariance: each rule of buffer_rules.h (buffer rules and value rules) as a named RapidCheck
/// property over random inputs, and check_buffer_rule, the same check on one input without RapidCheck.
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <exception>
#include <set>
#include <source_location>
#include <sstream>
#include <utility>

#include <tapegrad/framework/autograd/tape_inspect.h>
#include <tapegrad/framework/testing/buffer_rules.h>
#include <tapegrad/framework/testing/report.h>
#include <tapegrad/framework/testing/value_rules.h>

namespace tapegrad::testing {

namespace internal {

inline CheckResult check_state_is_parameters_and_buffers(nn::Module& m, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::StateIsParametersAndBuffers;
  const nn::NamedTensors parameters = m.named_parameters(), buffers = m.named_buffers();
  std::set<std::string> parameter_names, buffer_names, state_names;
  for (const auto& [name, p] : parameters) parameter_names.insert(name);
  for (const auto& [name, b] : buffers) {
    buffer_names.insert(name);
    if (parameter_names.count(name)) return broken(rule, fmt::format("'{}' is both a parameter and a buffer", name));
    if (b.requires_grad()) return broken(rule, fmt::format("buffer '{}' requires grad", name));
    for (const auto& [parameter_name, p] : parameters)
      if (b.numel() > 0 && p.raw_data() == b.raw_data())
        return broken(rule, fmt::format("buffer '{}' shares its storage with parameter '{}', so an optimizer would "
                                        "update it", name, parameter_name));
  }
  for (const auto& [name, t] : m.state()) {
    if (!state_names.insert(name).second) return broken(rule, fmt::format("state() holds '{}' twice", name));
    if (!parameter_names.count(name) && !buffer_names.count(name))
      return broken(rule, fmt::format("state() entry '{}' is neither a parameter nor a buffer", name));
  }
  for (const std::string& name : parameter_names)
    if (!state_names.count(name)) return broken(rule, fmt::format("parameter '{}' is not in state()", name));
  for (const std::string& name : buffer_names)
    if (!state_names.count(name) && !listed(name, o.non_persistent))
      return broken(rule, fmt::format("buffer '{}' is not reached by state(), so save and load lose it (list it in "
                                      "non_persistent if that is meant)", name));
  return {};
}

/// Runs one forward in `training` mode and reports any parameter, or any buffer not in `may_change`, it changed.
inline CheckResult check_forward_changes(BufferRule rule, nn::Module& m, const Tensor& input, bool training,
                                         const std::vector<std::string>& may_change) {
  m.train(training);
  const nn::NamedTensors parameters = m.named_parameters(), buffers = m.named_buffers();
  const std::vector<Tensor> parameters_before = values_of(parameters), buffers_before = values_of(buffers);
  const Tensor y = m(tracked(input));
  const char* mode = training ? "a training" : "an eval";
  if (auto change = first_change(parameters, parameters_before, "parameter"))
    return broken(rule, fmt::format("{} changed in {} forward; parameters change only through an optimizer ({})",
                                    change->what, mode, change->detail));
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (!listed(buffers[i].first, may_change))
      if (CheckResult c = identical(buffers[i].second, buffers_before[i]); !c)
        return broken(rule, fmt::format("buffer '{}' changed in {} forward{} ({})", buffers[i].first, mode,
                                        training ? " but is not declared in statistics" : "", c.message));
  return {};
}

inline CheckResult check_no_grad_records_nothing(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  for (const bool training : modes(o)) {
    m.train(training);
    const Tensor x = tracked(input);
    const std::size_t before = tape_size();
    NoGradGuard no_grad;
    const Tensor y = m(x);
    // Note: an identity (Dropout in eval) may return its input itself, which requires grad; nothing else may.
    if (tape_size() != before || (y.requires_grad() && !y.is_same(x)))
      return broken(BufferRule::NoGradRecordsNothing,
                    fmt::format("{} forward under NoGradGuard added {} records to the tape{}",
                                training ? "a training" : "an eval", tape_size() - before,
                                y.requires_grad() ? " and returned an output that requires grad" : ""));
  }
  return {};
}

inline CheckResult check_forward_records_only_its_graph(nn::Module& m, const Tensor& input,
                                                        const BufferInvarianceOptions& o) {
  for (const bool training : modes(o)) {
    m.train(training);
    const Tensor x = tracked(input);
    // Note: pruning first resets the automatic pruning threshold, so nothing is pruned during the forward.
    prune_tape();
    const Tensor y = m(x);
    std::string dead;  // the unreachable records' op names, oldest first
    for (const std::string& op : autograd::unreachable_record_ops()) dead += (dead.empty() ? "" : ", ") + op;
    const std::size_t recorded = tape_size();
    prune_tape();
    if (tape_size() == recorded) continue;
    // Note: the cause is told apart by the buffers: an update recorded on the tape leaves its buffer requiring
    // grad; a statistic computed with grad on does not. The dead records' op names say which operations.
    std::string cause;
    for (const auto& [name, b] : m.named_buffers())
      if (cause.empty() && b.requires_grad())
        cause = fmt::format("the update itself is recorded: buffer '{}' {} now requires grad{}; do the update "
                            "under NoGradGuard", name, shape_string(b.shape()),
                            b.grad_fn_name().empty() ? "" : " (grad_fn " + b.grad_fn_name() + ")");
    if (cause.empty())
      cause = "no buffer requires grad, so the update itself is not recorded: a value computed with grad mode on "
              "feeds it (a batch statistic such as mean(x) taken before the NoGradGuard?); compute it under the "
              "guard, or from x.detach()";
    return broken(BufferRule::ForwardRecordsOnlyItsGraph,
                  fmt::format("a {} forward on an input of shape {} recorded {} operations whose results neither "
                              "the output nor anything else alive uses, so no gradient can reach them ({}): {}",
                              training ? "training" : "eval", shape_string(input.shape()), recorded - tape_size(),
                              dead, cause));
  }
  return {};
}

inline CheckResult check_statistics_ignore_grad_mode(nn::Module& m, const ModuleFactory& make, const Tensor& input) {
  const std::shared_ptr<nn::Module> other = twin(m, make);
  m.train();
  other->train();
  m(tracked(input));
  {
    NoGradGuard no_grad;
    (*other)(input);
  }
  const nn::NamedTensors with_grad = m.named_buffers(), without_grad = other->named_buffers();
  for (std::size_t i = 0; i < with_grad.size(); ++i)
    if (CheckResult c = identical(without_grad[i].second, with_grad[i].second); !c)
      return broken(BufferRule::StatisticsIgnoreGradMode,
                    fmt::format("buffer '{}' after a training forward under NoGradGuard differs from the same forward "
                                "with grad mode on ({})", with_grad[i].first, c.message));
  return {};
}

inline CheckResult check_backward_writes_no_buffer(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::BackwardWritesNoBuffer;
  for (const bool training : modes(o)) {
    m.train(training);
    const Tensor y = m(tracked(input));
    if (!y.requires_grad()) continue;
    const nn::NamedTensors parameters = m.named_parameters(), buffers = m.named_buffers();
    const std::vector<Tensor> parameters_before = values_of(parameters), buffers_before = values_of(buffers);
    Generator generator(static_cast<std::uint64_t>(y.numel()));
    y.backward(randn(y.shape(), generator, TensorOptions{}.with_dtype(y.dtype())));
    const char* mode = training ? "training" : "eval";
    if (auto change = first_change(buffers, buffers_before, "buffer"))
      return broken(rule, fmt::format("{} changed during backward after a {} forward ({})", change->what, mode,
                                      change->detail));
    if (auto change = first_change(parameters, parameters_before, "parameter"))
      return broken(rule, fmt::format("{} changed during backward after a {} forward ({})", change->what, mode,
                                      change->detail));
    for (const auto& [name, b] : buffers)
      if (b.grad().defined()) return broken(rule, fmt::format("buffer '{}' received a gradient", name));
  }
  return {};
}

inline CheckResult check_load_state_restores(nn::Module& m, const ModuleFactory& make) {
  const BufferRule rule = BufferRule::LoadStateRestoresEverything;
  const nn::NamedTensors wanted = shifted(m.state());
  const std::shared_ptr<nn::Module> other = twin(m, make);
  try {
    other->load_state(wanted);
  } catch (const std::exception& e) {
    return broken(rule, fmt::format("load_state refused a state of the module's own names, shapes and dtypes: {}",
                                    e.what()));
  }
  nn::NamedTensors everything = other->named_parameters();
  for (const auto& entry : other->named_buffers()) everything.push_back(entry);
  for (const auto& [name, value] : wanted)
    for (const auto& [other_name, t] : everything)
      if (other_name == name)
        if (CheckResult c = identical(t, value); !c)
          return broken(rule, fmt::format("'{}' does not hold the loaded value ({})", name, c.message));
  return {};
}

inline CheckResult check_save_load_reproduces_eval(nn::Module& m, const ModuleFactory& make, const Tensor& input) {
  m.eval();
  const Tensor expected = m(input).detach();
  std::stringstream file;
  save(m, file);
  const std::shared_ptr<nn::Module> other = twin(m, make);
  other->load_state(shifted(other->state()));  // so that a load which changes nothing cannot pass
  other->train();
  load(*other, file);
  other->eval();
  if (CheckResult c = identical(other->forward(input).detach(), expected); !c)
    return broken(BufferRule::SaveLoadReproducesEval,
                  fmt::format("the eval output of a module loaded from a saved file differs from the saved module's "
                              "({})", c.message));
  return {};
}

inline CheckResult check_failed_load_changes_nothing(nn::Module& m) {
  const BufferRule rule = BufferRule::FailedLoadChangesNothing;
  const nn::NamedTensors state = m.state();
  const std::vector<Tensor> before = values_of(state);
  const std::vector<bool> grad_flags = requires_grad_flags(m), train_flags = training_flags(m);
  const nn::NamedTensors valid = shifted(state);
  struct Corruption {
    std::string what;
    nn::NamedTensors entries;
    bool must_fail;
  };
  std::vector<Corruption> corruptions;
  if (!valid.empty()) {
    const auto& [name, t] = valid.back();
    corruptions.push_back({fmt::format("key '{}' missing", name), nn::NamedTensors(valid.begin(), valid.end() - 1), true});
    nn::NamedTensors reshaped = valid;
    Shape shape = t.shape();
    shape.push_back(2);
    reshaped.back().second = zeros(shape, TensorOptions{}.with_dtype(t.dtype()));
    corruptions.push_back({fmt::format("'{}' of shape {}", name, shape_string(shape)), reshaped, true});
  }
  nn::NamedTensors extra = valid;
  extra.emplace_back("tapegrad_testing_unexpected", zeros({1}));
  corruptions.push_back({"an unexpected key", extra, true});
  // A state the module itself may reject (in after_load_state): NaN for every float, -1 for every integer.
  nn::NamedTensors poisoned;
  for (const auto& [name, t] : valid)
    poisoned.emplace_back(name, full(t.shape(), is_floating(t.dtype()) ? NAN : -1.0, TensorOptions{}.with_dtype(t.dtype())));
  corruptions.push_back({"NaN and -1 values", poisoned, false});
  for (const Corruption& c : corruptions) {
    try {
      m.load_state(c.entries);
    } catch (const std::exception& e) {
      if (auto change = first_change(m.state(), before, "entry"))
        return broken(rule, fmt::format("load_state of a state with {} threw ({}) but {} changed ({})", c.what,
                                        e.what(), change->what, change->detail));
      if (requires_grad_flags(m) != grad_flags || training_flags(m) != train_flags)
        return broken(rule, fmt::format("load_state of a state with {} threw ({}) but changed requires_grad or "
                                        "training flags", c.what, e.what()));
      continue;
    }
    if (c.must_fail) return broken(rule, fmt::format("load_state accepted a state with {}", c.what));
  }
  return {};
}

}  // namespace internal

/// Whether `rule` says anything for these options (a rule that does not is not run as a property).
inline bool rule_applies(BufferRule rule, const BufferInvarianceOptions& o) {
  const bool declares = !o.statistics.empty() || static_cast<bool>(o.statistics_of);
  switch (rule) {
    case BufferRule::TrainingChangesOnlyStatistics:
    case BufferRule::StatisticsIgnoreGradMode: return o.train_mode;
    case BufferRule::StatisticsChangeInTraining: return o.train_mode && declares;
    case BufferRule::EvalIsPerSample: return o.per_sample_eval.value_or(declares);
    case BufferRule::MatchesReference: return static_cast<bool>(o.reference);
    case BufferRule::MomentumIsConvex: return o.train_mode && static_cast<bool>(o.momentum);
    default: return true;
  }
}

/// Checks one rule on a module from `make` and one input, without RapidCheck (ok when the rule does not apply).
/// Every rule first checks that each declared statistic is a registered buffer: a plain member or a misspelt
/// name would make every other result meaningless.
inline CheckResult check_buffer_rule(BufferRule rule, const ModuleFactory& make, const Tensor& input,
                                     const BufferInvarianceOptions& options = {}) {
  using namespace internal;
  if (!rule_applies(rule, options)) return {};
  try {
    const std::shared_ptr<nn::Module> m = prepared(make, input, options, false);
    if (CheckResult c = check_declared_statistics(*m, options); !c) return c;
    if (rule != BufferRule::TrainingChangesOnlyStatistics) warm_up(*m, input, options);
    switch (rule) {
      case BufferRule::StateIsParametersAndBuffers: return check_state_is_parameters_and_buffers(*m, options);
      case BufferRule::StatisticsAreBuffers: return {};  // checked above
      case BufferRule::TrainingChangesOnlyStatistics:
        return check_forward_changes(rule, *m, input, true, declared(*m, options));
      case BufferRule::EvalChangesNothing: return check_forward_changes(rule, *m, input, false, {});
      case BufferRule::NoGradRecordsNothing: return check_no_grad_records_nothing(*m, input, options);
      case BufferRule::ForwardRecordsOnlyItsGraph: return check_forward_records_only_its_graph(*m, input, options);
      case BufferRule::StatisticsIgnoreGradMode: return check_statistics_ignore_grad_mode(*m, make, input);
      case BufferRule::BackwardWritesNoBuffer: return check_backward_writes_no_buffer(*m, input, options);
      case BufferRule::LoadStateRestoresEverything: return check_load_state_restores(*m, make);
      case BufferRule::SaveLoadReproducesEval: return check_save_load_reproduces_eval(*m, make, input);
      case BufferRule::FailedLoadChangesNothing: return check_failed_load_changes_nothing(*m);
      case BufferRule::StatisticsChangeInTraining: return check_statistics_change(*m, input, options);
      case BufferRule::EvalIsPerSample: return check_eval_per_sample(*m, input, options);
      case BufferRule::MatchesReference: return check_reference(*m, input, options);
      case BufferRule::MomentumIsConvex: return check_momentum(*m, input, options);
    }
  } catch (const std::exception& e) {
    return broken(rule, fmt::format("the check threw on an input of shape {}: {}", shape_string(input.shape()),
                                    e.what()));
  }
  return {};
}

/// Cases of the save/load property: a checkpoint round trip costs far more than a forward (the writer's 1 MiB
/// buffer), and the rule does not depend on values, so fewer random shapes and options cover it.
inline constexpr int save_load_cases = 10;

/// Properties, one per rule that applies (named by rule_name): modules from `make_module` keep every rule for
/// inputs drawn from `inputs`. The input must be valid in training mode too (BatchNorm: two values per channel).
/// A failure is reported at the caller's line, with the case (input shape, module) and the command replaying it.
inline void check_buffer_invariance(const ModuleFactory& make_module, const rc::Gen<Tensor>& inputs,
                                    const BufferInvarianceOptions& options = {},
                                    std::source_location where = std::source_location::current()) {
  const rc::Gen<Tensor> labelled = inputs.as("input");
  for (const BufferRule rule : all_buffer_rules()) {
    if (!rule_applies(rule, options)) continue;
    internal::property(internal::property_name(options.label, rule_name(rule)), where, [=] {
      // The module is made before the input is drawn, so a factory may draw options the input generator
      // reads; check_buffer_rule then gets that module first and fresh ones after it.
      std::shared_ptr<nn::Module> first = make_module();
      const std::shared_ptr<nn::Module> described = first;
      const Tensor input = *labelled;
      const ModuleFactory replay = [first, make_module]() mutable {
        return first ? std::exchange(first, nullptr) : make_module();
      };
      const CheckResult result = check_buffer_rule(rule, replay, input, options);
      if (!result.ok)
        internal::fail_case(fmt::format("{}\n\nthe case: an input of shape {}, the module {}", result.message,
                            shape_string(input.shape()), described->repr()));
    }, rule == BufferRule::SaveLoadReproducesEval ? save_load_cases : 0);
  }
}

/// The same, with float64 inputs of shapes drawn from `shapes` and values in [-2, 2].
inline void check_buffer_invariance(const ModuleFactory& make_module, const rc::Gen<Shape>& shapes,
                                    const BufferInvarianceOptions& options = {},
                                    std::source_location where = std::source_location::current()) {
  check_buffer_invariance(make_module, inputs_of(shapes), options, where);
}

}  // namespace tapegrad::testing
