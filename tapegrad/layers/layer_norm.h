#pragma once
/// nn::LayerNorm: normalises each sample over its trailing dims. It has parameters but no buffers.
#include <tapegrad/export.h>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for LayerNorm, with PyTorch's names and defaults.
struct LayerNormOptions {
  /// The trailing extents normalised over, e.g. {C} or {C, H, W}.
  Shape normalized_shape;
  double eps = 1e-5;
  /// Learnable weight (init 1) and bias (init 0) of shape normalized_shape.
  bool elementwise_affine = true;
  /// With elementwise_affine, whether there is a bias (PyTorch 2.1's `bias` option).
  bool bias = true;
  DType dtype = DType::Float32;
  LayerNormOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  LayerNormOptions& with_elementwise_affine(bool on) {
    elementwise_affine = on;
    return *this;
  }
  LayerNormOptions& with_bias(bool on) {
    bias = on;
    return *this;
  }
  LayerNormOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
};

/// Note: unlike BatchNorm, LayerNorm's statistics are per sample, computed fresh in every forward in both
/// training and eval mode, so there is nothing to track: no running statistics, no buffers.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(LayerNormOptions options);
  explicit LayerNorm(Shape normalized_shape) : LayerNorm(LayerNormOptions{std::move(normalized_shape)}) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const LayerNormOptions& options() const { return options_; }

  /// Undefined without elementwise_affine.
  Tensor weight;
  /// Undefined without elementwise_affine or bias.
  Tensor bias;

 private:
  LayerNormOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
