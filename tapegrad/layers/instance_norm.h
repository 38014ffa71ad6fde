#pragma once
/// InstanceNorm1d and InstanceNorm2d with PyTorch's semantics: per-sample, per-channel statistics, and optional
/// running statistics (track_running_stats) used in eval.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// InstanceNorm's options, with PyTorch's names and defaults (note affine and track_running_stats are off).
struct InstanceNormOptions {
  /// C, the number of channels (dim 1 of a batched input).
  std::int64_t num_features = 0;
  /// Added to the variance before the square root.
  double eps = 1e-5;
  /// Weight of the new batch in the running update (PyTorch's convention). PyTorch's InstanceNorm has no
  /// cumulative average (momentum=None is an error there), so this is a plain number.
  double momentum = 0.1;
  /// Learnable per-channel weight (init 1) and bias (init 0), shape [C].
  bool affine = false;
  /// Keep running_mean, running_var and num_batches_tracked buffers and use them in eval.
  bool track_running_stats = false;
  /// The element type of the parameters and running statistics.
  DType dtype = DType::Float32;
  InstanceNormOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  InstanceNormOptions& with_momentum(double value) {
    momentum = value;
    return *this;
  }
  InstanceNormOptions& with_affine(bool on) {
    affine = on;
    return *this;
  }
  InstanceNormOptions& with_track_running_stats(bool on) {
    track_running_stats = on;
    return *this;
  }
  InstanceNormOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
};

/// Note: each (sample, channel) plane is normalised with its own mean and biased variance over the spatial
/// dims, in training and, unless track_running_stats, in eval too. With track_running_stats, a training forward
/// also moves the running statistics by PyTorch's rule: running = (1 - momentum) * running + momentum * s, where
/// s is the instance mean (or unbiased instance variance) averaged over the batch; the update happens outside
/// the graph, under an internal NoGradGuard, whatever the grad mode (only the training flag decides), and eval
/// then normalises with the running statistics. As in PyTorch 1.13, num_batches_tracked is registered (so
/// state_dict keys match) but InstanceNorm never increments it. Unbatched input ([C, L] for InstanceNorm1d,
/// [C, H, W] for InstanceNorm2d) is treated as a batch of one. Normalising with instance statistics needs
/// more than one spatial element (PyTorch's "Expected more than 1 spatial element when training").
class InstanceNormBase : public Module {
 public:
  /// `type_name` is "InstanceNorm1d" or "InstanceNorm2d"; `spatial_dims` 1 or 2.
  InstanceNormBase(std::string type_name, int spatial_dims, const InstanceNormOptions& options);

  Tensor forward(const Tensor& input) override;
  /// "3, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false".
  std::string extra_repr() const override;
  const InstanceNormOptions& options() const { return options_; }
  /// Resets running_mean to 0, running_var to 1 and num_batches_tracked to 0 (when tracking).
  void reset_running_stats();

  /// [C] parameters when affine, else undefined.
  Tensor weight, bias;
  /// [C] buffers and a 0-dim int64 counter when track_running_stats, else undefined.
  Tensor running_mean, running_var, num_batches_tracked;

 private:
  InstanceNormOptions options_;
  int spatial_dims_;
};

/// InstanceNorm over [N, C, L] (or unbatched [C, L]).
class InstanceNorm1d : public InstanceNormBase {
 public:
  explicit InstanceNorm1d(const InstanceNormOptions& options) : InstanceNormBase("InstanceNorm1d", 1, options) {}
  explicit InstanceNorm1d(std::int64_t num_features) : InstanceNorm1d(InstanceNormOptions{num_features}) {}
  std::shared_ptr<Module> clone() const override;
};

/// InstanceNorm over [N, C, H, W] (or unbatched [C, H, W]).
class InstanceNorm2d : public InstanceNormBase {
 public:
  explicit InstanceNorm2d(const InstanceNormOptions& options) : InstanceNormBase("InstanceNorm2d", 2, options) {}
  explicit InstanceNorm2d(std::int64_t num_features) : InstanceNorm2d(InstanceNormOptions{num_features}) {}
  std::shared_ptr<Module> clone() const override;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
