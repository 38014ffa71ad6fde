#pragma once
/// fuse_batchnorm: an inference copy of a model with each Conv2d->BatchNorm2d and Linear->BatchNorm1d pair folded.
#include <tapegrad/export.h>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Note: folding. In eval mode a BatchNorm is the per-channel affine map x * s + (beta - mean * s) with
/// s = gamma / sqrt(running_var + eps), so after a Conv2d or Linear with weight w and bias b (0 when absent)
/// the pair is one layer with w' = w * s (output channel c scaled by s_c) and b' = (b - mean) * s + beta.
/// The arithmetic is done in double and rounded once to the layer's dtype.
/// The copy keeps every module's name: the folded layer takes the Conv2d's or Linear's slot (now with a bias),
/// and the BatchNorm's slot holds a FoldedBatchNorm, the identity. The copy is eval-only: a FoldedBatchNorm
/// refuses a training-mode forward, since training the folded model would train a different model.

/// An eval-mode deep copy of `model` (through clone()) with every BatchNorm folded into the Conv2d
/// (BatchNorm2d) or Linear (BatchNorm1d) right before it in a Sequential. Throws when a module of `model` is in
/// training mode, or when a BatchNorm cannot be folded: not directly after a matching layer in a Sequential,
/// a channel count that differs from that layer's outputs, or track_running_stats off (no statistics to fold).
std::shared_ptr<Module> fuse_batchnorm(const Module& model);

/// What fuse_batchnorm leaves where a BatchNorm was: the identity in eval mode, an error in training mode.
class FoldedBatchNorm : public Module {
 public:
  /// `folded_into` is the type of the layer that absorbed the BatchNorm ("Conv2d" or "Linear").
  explicit FoldedBatchNorm(std::string folded_into);
  /// Returns `input`; throws in training mode, and after a Linear for input that is not [N, C].
  Tensor forward(const Tensor& input) override;
  /// "folded_into=Conv2d".
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::string folded_into_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
