#pragma once
/// nn::GroupNorm: normalises each sample over groups of channels. It has parameters but no buffers.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for GroupNorm, with PyTorch's names and defaults.
struct GroupNormOptions {
  /// G: the channels are split into G groups of num_channels / G consecutive channels.
  std::int64_t num_groups = 0;
  /// C, the number of channels (dim 1 of the input); must be divisible by num_groups.
  std::int64_t num_channels = 0;
  /// Added to the variance before the square root.
  double eps = 1e-5;
  /// Learnable per-channel weight (init 1) and bias (init 0), shape [C].
  bool affine = true;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  GroupNormOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  GroupNormOptions& with_affine(bool on) {
    affine = on;
    return *this;
  }
  GroupNormOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
};

/// Note: for input [N, C, *], each sample's channels are split into num_groups groups, and each group is
/// normalised with its own mean and biased variance over its channels and every spatial position; the
/// per-channel affine follows. Like LayerNorm the statistics are per sample and computed fresh in training
/// and eval alike, so there is nothing to track: no running statistics, no buffers. GroupNorm(1, C) is a
/// LayerNorm over [C, *] with per-channel affine; GroupNorm(C, C) an InstanceNorm with affine.
class GroupNorm : public Module {
 public:
  explicit GroupNorm(GroupNormOptions options);
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels)
      : GroupNorm(GroupNormOptions{num_groups, num_channels}) {}
  /// [N, C, *] -> same shape.
  Tensor forward(const Tensor& input) override;
  /// "2, 4, eps=1e-05, affine=true".
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const GroupNormOptions& options() const { return options_; }

  /// [C] parameters when affine, else undefined.
  Tensor weight, bias;

 private:
  GroupNormOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
