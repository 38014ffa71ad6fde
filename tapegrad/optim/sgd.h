#pragma once
/// Stochastic gradient descent with momentum, dampening, Nesterov, weight decay and maximize (PyTorch's SGD).
#include <tapegrad/export.h>
#include <limits>
#include <vector>

#include <tapegrad/optim/optimizer.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// SGD's hyperparameters; `lr` has no default (as in PyTorch) and must be set.
struct SGDOptions {
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

/// One parameter's SGD state, as PyTorch's optimizer.state[p]: a handle sharing the optimizer's tensor.
struct SGDParamState {
  /// The momentum buffer, shaped like the parameter; undefined before the first step or without momentum.
  Tensor momentum_buffer;
};

/// Note: PyTorch's formula. g = ±grad + weight_decay * p; with momentum the buffer starts as g and then
/// becomes momentum * buf + (1 - dampening) * g; Nesterov steps along g + momentum * buf, plain momentum
/// along buf; p -= lr * step. Group hyperparameters: lr, momentum, dampening, weight_decay, nesterov, maximize.
/// Per-parameter state: "momentum_buffer" (only with momentum).
class SGD : public Optimizer {
 public:
  /// One group holding `params` (usually model.parameters()).
  SGD(std::vector<Tensor> params, SGDOptions options);
  /// Several groups, each overriding some of `options` by name.
  SGD(std::vector<ParamGroup> groups, SGDOptions options);

  /// The state of `parameter` (one of this optimizer's), sharing the optimizer's tensors: writing through it
  /// changes the next step. Throws for a tensor the optimizer does not hold.
  SGDParamState state(const Tensor& parameter) const;
  /// The named state, for saving and loading.
  using Optimizer::state;

 protected:
  void update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) override;
  void validate(const Options& options) const override;
  std::vector<std::string> required_state_keys() const override { return {}; }
  std::vector<std::string> optional_state_keys() const override { return {"momentum_buffer"}; }
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
