#pragma once
/// The value rules: what a forward computes, not only what it touches. Every declared statistic is a registered
/// buffer and changes in a training forward; eval outputs are per sample; a forward matches the user's reference;
/// a momentum update is a convex combination. Each is checkable on one module and one input.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/testing/buffer_rules.h>

namespace tapegrad::testing::internal {

inline std::string names_of(const nn::NamedTensors& entries) {
  std::string out;
  for (const auto& [name, t] : entries) out += (out.empty() ? "'" : ", '") + name + "'";
  return out.empty() ? "none" : out;
}

/// Every declared statistic matches a registered buffer and no parameter. Checked before every rule: a
/// misspelt name, or a statistic kept as a plain member, would otherwise turn rules off or fail them obscurely.
inline CheckResult check_declared_statistics(const nn::Module& m, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::StatisticsAreBuffers;
  const nn::NamedTensors parameters = m.named_parameters(), buffers = m.named_buffers();
  for (const std::string& statistic : declared(m, o)) {
    for (const auto& [name, p] : parameters)
      if (listed(name, {statistic}))
        return broken(rule, fmt::format("statistic '{}' is registered as a parameter, so an optimizer sees it and "
                                        "it is saved as a parameter (register it with register_buffer)", name));
    bool found = false;
    for (const auto& [name, b] : buffers) found = found || listed(name, {statistic});
    if (!found)
      return broken(rule, fmt::format("statistic '{}' is declared but no registered buffer has that name (the "
                                      "module's buffers: {}). If the module keeps it as a plain member tensor, "
                                      "register it with register_buffer: only registered buffers are saved, loaded, "
                                      "converted by to() and checked (the kit cannot see plain members, so it "
                                      "cannot tell this from a misspelt name)", statistic, names_of(buffers)));
  }
  return {};
}

/// "[1.5, 2]" for a small tensor, "shape [4, 3]" for a larger one: what a message can show of a value.
inline std::string value_string(const Tensor& t) {
  if (t.numel() > 6) return fmt::format("a tensor of shape {}", shape_string(t.shape()));
  std::string out;
  for (const double v : t.to_vector()) out += fmt::format("{}{}", out.empty() ? "" : ", ", v);
  return t.dim() == 0 ? out : "[" + out + "]";
}

inline CheckResult check_statistics_change(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  const std::vector<std::string> statistics = declared(m, o);
  m.train();
  const nn::NamedTensors buffers = m.named_buffers();
  const std::vector<Tensor> before = values_of(buffers);
  m(tracked(input));
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (listed(buffers[i].first, statistics) && identical(buffers[i].second, before[i]))
      return broken(BufferRule::StatisticsChangeInTraining,
                    fmt::format("statistic '{}' kept its value ({}) through a training forward on an input of shape "
                                "{} (is its update missing, or applied to a copy?)",
                                buffers[i].first, value_string(before[i]), shape_string(input.shape())));
  return {};
}

/// Rows `index` of `x` along dimension 0, in that order.
inline Tensor rows(const Tensor& x, const std::vector<std::int64_t>& index) {
  return index_select(x, 0, from_vector(index, {static_cast<std::int64_t>(index.size())}));
}

inline CheckResult check_eval_per_sample(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::EvalIsPerSample;
  if (input.dim() == 0 || input.shape()[0] == 0) return {};
  if (!o.per_sample_eval) {
    // The default: on for a case whose module keeps a floating-point running statistic (a normalisation layer
    // without one, such as BatchNorm without track_running_stats, normalises by its batch in eval too).
    bool running = false;
    for (const auto& [name, b] : m.named_buffers()) running = running || (is_floating(b.dtype()) && listed(name, declared(m, o)));
    if (!running) return {};
  }
  const std::int64_t n = input.shape()[0];
  NoGradGuard no_grad;
  m.eval();
  const Tensor batch = m(input);
  if (batch.dim() == 0 || batch.shape()[0] != n)
    return broken(rule, fmt::format("the eval output of an input of shape {} has shape {}, not one row per sample "
                                    "(set per_sample_eval = false for a module whose outputs are not per sample)",
                                    shape_string(input.shape()), shape_string(batch.shape())));
  const char* hint = "an eval forward must not use the statistics of its batch (is the eval output computed from "
                     "the batch's statistics instead of the running ones?)";
  for (std::int64_t i = 0; i < n; ++i) {
    const Tensor alone = m(input.narrow(0, i, 1));
    if (CheckResult c = allclose(alone, batch.narrow(0, i, 1), o.rtol, o.atol); !c)
      return broken(rule, fmt::format("sample {}'s eval output alone differs from its output in the batch of {} "
                                      "({}); {}", i, n, c.message, hint));
  }
  std::vector<std::int64_t> reversed;
  for (std::int64_t i = n; i-- > 0;) reversed.push_back(i);
  if (CheckResult c = allclose(m(rows(input, reversed)), rows(batch, reversed), o.rtol, o.atol); !c)
    return broken(rule, fmt::format("the eval output of the batch of {} in reverse order is not the reversed "
                                    "output ({}); {}", n, c.message, hint));
  return {};
}

inline CheckResult check_reference(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::MatchesReference;
  for (const bool training : modes(o)) {
    const char* mode = training ? "a training" : "an eval";
    m.train(training);
    const nn::NamedTensors buffers = m.named_buffers();
    const std::vector<Tensor> before = values_of(buffers);
    Expected expected;
    {
      NoGradGuard no_grad;
      expected = o.reference(m, input.detach().clone(), training);
    }
    if (auto change = first_change(buffers, before, "buffer"))
      return broken(rule, fmt::format("the reference changed {} ({}); it must compute the new value, not apply it",
                                      change->what, change->detail));
    for (const auto& [key, value] : expected.statistics) {
      bool found = false;
      for (const auto& [name, b] : buffers) found = found || listed(name, {key});
      if (!found)
        return broken(rule, fmt::format("the reference gives a new value for '{}', which is no buffer (the module's "
                                        "buffers: {})", key, names_of(buffers)));
    }
    const Tensor y = m(tracked(input));
    if (CheckResult c = allclose(y, expected.output, o.rtol, o.atol); !c)
      return broken(rule, fmt::format("{} forward's output on an input of shape {} differs from the reference's ({})",
                                      mode, shape_string(input.shape()), c.message));
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const std::string& name = buffers[i].first;
      const Tensor* wanted = nullptr;
      for (const auto& [key, value] : expected.statistics)
        if (listed(name, {key})) wanted = &value;
      if (wanted == nullptr) {
        if (CheckResult c = identical(buffers[i].second, before[i]); !c)
          return broken(rule, fmt::format("buffer '{}' changed in {} forward, but the reference gives it no new "
                                          "value, so it must keep its value ({})", name, mode, c.message));
        continue;
      }
      if (CheckResult c = allclose(buffers[i].second, *wanted, o.rtol, o.atol); !c)
        return broken(rule, fmt::format("after {} forward on an input of shape {}, statistic '{}' differs from the "
                                        "reference's new value ({}; before the forward it held {})", mode,
                                        shape_string(input.shape()), name, c.message, value_string(before[i])));
    }
  }
  return {};
}

/// What a ratio r of (new difference) / (old difference) says about a momentum update.
inline std::string momentum_diagnosis(double r, double m) {
  const auto near = [&](double target) { return std::abs(r - target) <= 1e-6 * (1 + std::abs(target)); };
  if (near(m)) return "r = m: the momentum convention is inverted (running = m * running + (1 - m) * batch)";
  if (near((1 - m) * (1 - m))) return "r = (1 - m)^2: the update is applied twice per forward";
  if (near(1)) return "r = 1: the statistic moves by the same amount whatever its old value (not an average)";
  if (near(0)) return "r = 0: the new value does not depend on the old one (replaced by the batch's value?)";
  return "not a convex combination with this momentum";
}

inline CheckResult check_momentum(nn::Module& m, const Tensor& input, const BufferInvarianceOptions& o) {
  const BufferRule rule = BufferRule::MomentumIsConvex;
  const std::optional<double> momentum = o.momentum(m);
  if (!momentum) return {};
  const double mo = *momentum;
  const std::vector<std::string> statistics = o.momentum_statistics.empty() ? declared(m, o) : o.momentum_statistics;
  NoGradGuard no_grad;
  m.train();
  const nn::NamedTensors buffers = m.named_buffers();
  const std::vector<Tensor> old_state = values_of(buffers);
  m(input);
  const std::vector<Tensor> first = values_of(buffers);
  // The same step from a second old state, each statistic moved by d > 0: with
  // new = (1 - m) * old + m * batch, the two new values differ by exactly (1 - m) * d.
  std::vector<Tensor> second_state = old_state, shifts(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (!listed(buffers[i].first, statistics) || !is_floating(old_state[i].dtype())) continue;
    shifts[i] = 0.25 + 0.5 * abs(old_state[i]);
    second_state[i] = old_state[i] + shifts[i];
  }
  restore(buffers, second_state);
  m(input);
  const std::vector<Tensor> second = values_of(buffers);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (!shifts[i].defined()) continue;
    const Tensor moved = second[i] - first[i];
    const double scale = max(abs(first[i])).item() + max(abs(second[i])).item();
    if (allclose(moved, (1 - mo) * shifts[i], 0.0, o.atol + o.rtol * scale)) continue;
    const double r = sum(moved * shifts[i]).item() / sum(shifts[i] * shifts[i]).item();
    return broken(rule, fmt::format("statistic '{}' with momentum {}: one training step on the same input from two "
                                    "old states that differ by d gives new values that differ by r * d with r = {:.6g}, "
                                    "but running = (1 - m) * running + m * batch gives r = 1 - m = {:.6g} ({})",
                                    buffers[i].first, mo, r, 1 - mo, momentum_diagnosis(r, mo)));
  }
  return {};
}

}  // namespace tapegrad::testing::internal
