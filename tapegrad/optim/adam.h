#pragma once
/// Adam (L2 weight decay in the gradient) and AdamW (decoupled weight decay), with amsgrad (PyTorch's formulas).
#include <tapegrad/export.h>
#include <utility>
#include <vector>

#include <tapegrad/optim/optimizer.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// Adam's hyperparameters, PyTorch's defaults.
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

/// AdamW's hyperparameters: as Adam's, but weight decay defaults to 0.01.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

/// One parameter's Adam (or AdamW) state, as PyTorch's optimizer.state[p]: handles sharing the optimizer's tensors,
/// all undefined before the parameter's first step.
struct AdamParamState {
  /// The number of steps taken, a 0-dim int64 tensor.
  Tensor step;
  /// The first and second moment estimates m and v, shaped like the parameter.
  Tensor exp_avg, exp_avg_sq;
  /// The running maximum of v with amsgrad; undefined without.
  Tensor max_exp_avg_sq;
};

/// Note: PyTorch's formula. t += 1; g = ±grad + weight_decay * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// (amsgrad: vmax = max(vmax, v), used instead of v); p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
/// Group hyperparameters: lr, beta1, beta2, eps, weight_decay, amsgrad, maximize.
/// Per-parameter state: "step" (int64), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
class Adam : public Optimizer {
 public:
  /// One group holding `params` (usually model.parameters()).
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  /// Several groups, each overriding some of `options` by name.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});

  /// The state of `parameter` (one of this optimizer's), sharing the optimizer's tensors: writing through it
  /// changes the next step. Throws for a tensor the optimizer does not hold.
  AdamParamState state(const Tensor& parameter) const;
  /// The named state, for saving and loading.
  using Optimizer::state;

 protected:
  /// For AdamW: `decoupled` applies weight decay to p directly instead of adding it to the gradient.
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled);
  void update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) override;
  void validate(const Options& options) const override;
  std::vector<std::string> required_state_keys() const override { return {"step", "exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> optional_state_keys() const override { return {"max_exp_avg_sq"}; }

 private:
  bool decoupled_;
};

/// Note: AdamW first shrinks p *= (1 - lr * weight_decay), then takes the Adam step with no decay term in g,
/// so the decay does not pass through the adaptive scaling (Loshchilov and Hutter's decoupled weight decay).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
