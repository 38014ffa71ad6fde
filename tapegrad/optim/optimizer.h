#pragma once
/// The Optimizer base: parameter groups with their hyperparameters, zero_grad, step, and named state.
#include <tapegrad/export.h>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

using nn::NamedTensors;

/// Hyperparameters by name ("lr", "weight_decay", "momentum", "beta1", ...); flags are stored as 0 or 1.
using Options = std::map<std::string, double>;

/// A set of parameters sharing hyperparameters. At construction `options` holds overrides of the optimizer's
/// defaults (`{{"weight_decay", 0.0}}`); afterwards it holds the complete set, which may be changed between steps.
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;

  /// The group's learning rate.
  double lr() const { return get("lr"); }
  /// Changes the group's learning rate (what schedulers do).
  void set_lr(double lr) { set("lr", lr); }
  /// The hyperparameter `name`; throws when the group has none by that name.
  double get(const std::string& name) const;
  /// Sets (or adds) the hyperparameter `name`.
  void set(const std::string& name, double value) { options[name] = value; }
  /// True when the group has a hyperparameter called `name`.
  bool has(const std::string& name) const { return options.count(name) != 0; }
};

/// Note: an optimizer sees parameters only, never buffers (construction refuses a buffer). Its state lives
/// beside the parameter list, by group and position, never keyed by a tensor's address, so it survives a model
/// being reloaded and can be saved as named tensors: "group0.lr", "group0.num_params", "group0.param3.exp_avg".
/// step() runs under NoGradGuard, skips parameters whose grad is undefined and writes only into parameters
/// and the optimizer's own state, one fused pass over each parameter's raw data.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Clears every parameter's grad (set_to_none) or sets it to zeros.
  void zero_grad(bool set_to_none = true);
  /// One update of every parameter that has a grad.
  virtual void step();
  /// The groups, in construction order; change `lr` (or any hyperparameter) through them.
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// Adds a group (overrides of the defaults, validated like the constructor's groups).
  void add_param_group(ParamGroup group);
  /// The defaults every group starts from.
  const Options& defaults() const { return defaults_; }
  /// "SGD", "Adam", "AdamW", "RMSprop".
  const std::string& name() const { return name_; }

  /// Every group's hyperparameters and parameter count, and every per-parameter state tensor, by name.
  /// The tensors are independent copies, so the result stays valid while training continues. This is the form
  /// for saving and loading; each optimizer's state(parameter) gives typed access to one parameter's state.
  NamedTensors state() const;
  /// Restores a state() of an optimizer over the same groups of the same shapes. Everything is checked first
  /// (names, shapes, dtypes, group sizes, hyperparameter values), so a failed load leaves this optimizer unchanged.
  void load_state(const NamedTensors& entries);

 protected:
  /// Per-parameter state by name ("exp_avg", "step"); created lazily on a parameter's first update.
  using ParamState = std::map<std::string, Tensor>;

  /// Stores the name and the defaults (derived constructors validate them, then call add_param_group).
  Optimizer(std::string name, Options defaults);
  /// Updates one parameter in place from its grad (same shape and dtype), under NoGradGuard.
  virtual void update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) = 0;
  /// Throws PyTorch's message ("Invalid learning rate: -0.1") for an invalid value in `options`.
  virtual void validate(const Options& options) const = 0;
  /// State names a parameter's state must have once created (Adam: step, exp_avg, exp_avg_sq).
  virtual std::vector<std::string> required_state_keys() const = 0;
  /// State names a parameter's state may have in addition (Adam: max_exp_avg_sq).
  virtual std::vector<std::string> optional_state_keys() const { return {}; }
  /// The state tensor `key`, created as zeros shaped like `param` when absent.
  static Tensor& zeros_state(ParamState& state, const std::string& key, const Tensor& param);
  /// Increments the int64 "step" counter (created at 0) and returns its new value.
  static std::int64_t increment_step(ParamState& state);
  /// For the typed state(parameter) of each optimizer: the state of `parameter`, found by identity (the same
  /// tensor handle the optimizer was built with, or a copy of it), empty before its first update. Throws,
  /// naming `caller`, when `parameter` is not one of this optimizer's parameters.
  const ParamState& param_state(const Tensor& parameter, const char* caller) const;
  /// The state tensor `key` itself (a handle sharing the optimizer's values), undefined when absent.
  static Tensor state_entry(const ParamState& state, const std::string& key);

 private:
  void validate_group(const Options& options, std::size_t index) const;

  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // [group][position]
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
