#pragma once
/// BatchNorm1d, BatchNorm2d and BatchNorm3d with PyTorch's semantics: batch statistics in training, running ones in eval.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// BatchNorm's options, with PyTorch's names and defaults.
struct BatchNormOptions {
  /// C, the number of channels (dim 1 of the input).
  std::int64_t num_features = 0;
  /// Added to the variance before the square root.
  double eps = 1e-5;
  /// Weight of the new batch in the running update (PyTorch's convention); nullopt = cumulative average.
  std::optional<double> momentum = 0.1;
  /// Learnable per-channel weight (init 1) and bias (init 0).
  bool affine = true;
  /// Keep running_mean, running_var and num_batches_tracked buffers and use them in eval.
  bool track_running_stats = true;
  /// Start frozen (see BatchNormBase::freeze()).
  bool frozen = false;
  /// The element type of weight, bias, running_mean and running_var (num_batches_tracked is always int64).
  DType dtype = DType::Float32;
  BatchNormOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  BatchNormOptions& with_momentum(std::optional<double> value) {
    momentum = value;
    return *this;
  }
  BatchNormOptions& with_affine(bool on) {
    affine = on;
    return *this;
  }
  BatchNormOptions& with_track_running_stats(bool on) {
    track_running_stats = on;
    return *this;
  }
  BatchNormOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
};

/// Converts a Keras/TensorFlow BatchNormalization momentum (the weight of the OLD running value, e.g. 0.99)
/// into tapegrad's (the weight of the NEW batch, e.g. 0.01): 1 - keras_momentum. Throws outside [0, 1].
double keras_momentum_to_tapegrad(double keras_momentum);

/// Note: the running-statistics update happens outside the graph: under an internal NoGradGuard, never
/// recorded, whether or not the caller is in grad mode. Only the training flag decides whether it happens
/// (requires_grad = false on weight and bias does not stop it). The output's graph depends only on the input,
/// weight and bias, never on a buffer.
/// Note: freezing. A frozen layer's mode is pinned to eval: train(true) from a parent is remembered, not obeyed,
/// so the running statistics never change and are what it normalizes with. Its weight and bias stop requiring
/// grad and lose any grad they held; a tensor that does not require grad has no grad, and optimizers skip
/// parameters without one, so they stay in model.parameters() (an optimizer's state layout does not change
/// on freeze or unfreeze) yet never move, weight decay included. The flag lives in the persistent buffer "frozen" (0-dim int64), so it is saved and
/// loaded with the state; after_load_state() re-applies it.
/// The shared implementation of BatchNorm1d, BatchNorm2d and BatchNorm3d.
class BatchNormBase : public Module {
 public:
  /// `type_name` is "BatchNorm1d", "BatchNorm2d" or "BatchNorm3d".
  BatchNormBase(std::string type_name, const BatchNormOptions& options);

  /// Normalizes over every dim but dim 1; in training also updates the running statistics.
  Tensor forward(const Tensor& input) override;
  /// "64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true".
  std::string extra_repr() const override;
  const BatchNormOptions& options() const { return options_; }

  /// Resets running_mean to 0, running_var to 1 and num_batches_tracked to 0.
  void reset_running_stats();

  /// Pins the layer to eval behaviour (even under a parent's train()), makes weight and bias stop requiring
  /// grad and drops any grad they hold. The running statistics never change while frozen.
  void freeze();
  /// Undoes freeze(): weight and bias require grad again and the layer takes the mode train() last asked for.
  void unfreeze();
  /// Whether the layer is frozen.
  bool frozen() const { return options_.frozen; }
  /// Records the requested mode; a frozen layer stays in eval mode.
  void train(bool on = true) override;

  /// Note: for recompute_batchnorm_statistics(). While an observer is set, forward() hands it each input and
  /// normalizes with the batch's statistics, as in training, without touching the running statistics.
  /// An empty function removes the observer.
  void set_input_observer(std::function<void(const Tensor&)> observer) { input_observer_ = std::move(observer); }

  /// [C] parameters when affine, else undefined.
  Tensor weight, bias;
  /// [C] buffers and a 0-dim int64 counter when track_running_stats, else undefined.
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  /// Checks the input's rank for this layer (BatchNorm1d: 2-D or 3-D, BatchNorm2d: 4-D, BatchNorm3d: 5-D).
  virtual void check_rank(const Tensor& input) const = 0;
  /// Version 2 added num_batches_tracked, as in PyTorch; version 3 added the "frozen" flag.
  int state_version() const override { return 3; }
  /// Fills a missing num_batches_tracked (version 1) and a missing frozen flag (versions 1-2) with 0.
  void upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const override;
  /// Freezes or unfreezes the layer as the loaded "frozen" buffer says.
  void after_load_state() override;

 private:
  // Note: Sequential runs a BatchNorm layer directly followed by a ReLU layer as forward_then_relu(): one pass
  // and one tape record instead of two, the same values, gradients and running statistics (detail/batch_norm_relu).
  friend class Sequential;
  /// relu(forward(input)).
  Tensor forward_then_relu(const Tensor& input);
  Tensor forward_impl(const Tensor& input, bool relu);
  void update_running_stats(const Tensor& batch_mean, const Tensor& batch_unbiased_var);
  BatchNormOptions options_;
  Tensor frozen_flag_;
  bool requested_training_ = true;
  std::function<void(const Tensor&)> input_observer_;
};

/// BatchNorm over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options);
  explicit BatchNorm1d(std::int64_t num_features) : BatchNorm1d(BatchNormOptions{num_features}) {}
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_rank(const Tensor& input) const override;
};

/// BatchNorm over [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options);
  explicit BatchNorm2d(std::int64_t num_features) : BatchNorm2d(BatchNormOptions{num_features}) {}
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_rank(const Tensor& input) const override;
};

/// BatchNorm over [N, C, D, H, W] (volumes: the statistics of a channel run over N, D, H and W).
class BatchNorm3d : public BatchNormBase {
 public:
  explicit BatchNorm3d(const BatchNormOptions& options);
  explicit BatchNorm3d(std::int64_t num_features) : BatchNorm3d(BatchNormOptions{num_features}) {}
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_rank(const Tensor& input) const override;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
