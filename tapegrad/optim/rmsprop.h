#pragma once
/// RMSprop with optional centering, momentum, weight decay and maximize (PyTorch's RMSprop).
#include <tapegrad/export.h>
#include <vector>

#include <tapegrad/optim/optimizer.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// RMSprop's hyperparameters, PyTorch's defaults.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

/// One parameter's RMSprop state, as PyTorch's optimizer.state[p]: handles sharing the optimizer's tensors,
/// all undefined before the parameter's first step.
struct RMSpropParamState {
  /// The number of steps taken, a 0-dim int64 tensor.
  Tensor step;
  /// The running average of g^2, shaped like the parameter.
  Tensor square_avg;
  /// With momentum > 0: the momentum buffer; undefined otherwise.
  Tensor momentum_buffer;
  /// With centered: the running average of g; undefined otherwise.
  Tensor grad_avg;
};

/// Note: PyTorch's formula. g = ±grad + weight_decay * p; s = alpha s + (1 - alpha) g^2; centered keeps
/// a = alpha a + (1 - alpha) g and uses sqrt(s - a^2) + eps as denominator, otherwise sqrt(s) + eps; with
/// momentum buf = momentum buf + g / denom and p -= lr * buf, otherwise p -= lr * g / denom.
/// Group hyperparameters: lr, alpha, eps, weight_decay, momentum, centered, maximize.
/// Per-parameter state: "step" (int64), "square_avg", "momentum_buffer" (momentum > 0), "grad_avg" (centered).
class RMSprop : public Optimizer {
 public:
  /// One group holding `params` (usually model.parameters()).
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  /// Several groups, each overriding some of `options` by name.
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = {});

  /// The state of `parameter` (one of this optimizer's), sharing the optimizer's tensors: writing through it
  /// changes the next step. Throws for a tensor the optimizer does not hold.
  RMSpropParamState state(const Tensor& parameter) const;
  /// The named state, for saving and loading.
  using Optimizer::state;

 protected:
  void update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) override;
  void validate(const Options& options) const override;
  std::vector<std::string> required_state_keys() const override { return {"step", "square_avg"}; }
  std::vector<std::string> optional_state_keys() const override { return {"momentum_buffer", "grad_avg"}; }
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
