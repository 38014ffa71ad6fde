#pragma once
/// nn::Linear: y = x W^T + b over the last dim, with PyTorch's default initialisation.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for Linear, with PyTorch's names and defaults.
struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  LinearOptions& with_bias(bool on) {
    bias = on;
    return *this;
  }
  LinearOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
  LinearOptions& with_generator(Generator& g) {
    generator = &g;
    return *this;
  }
};

/// A fully connected layer: weight [out_features, in_features], optional bias [out_features].
/// Note: initialised as PyTorch does: kaiming_uniform_ with a = sqrt(5), which works out to
/// weight ~ U(-1/sqrt(in), 1/sqrt(in)), and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  explicit Linear(LinearOptions options);
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true)
      : Linear(LinearOptions{in_features, out_features, bias}) {}

  /// x [..., in_features] -> [..., out_features].
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  /// The options the layer was built with (generator cleared).
  const LinearOptions& options() const { return options_; }
  /// Redraws weight and bias with PyTorch's default scheme.
  void reset_parameters(Generator& generator = default_generator());

  Tensor weight;
  /// Undefined when built with bias = false.
  Tensor bias;

 private:
  LinearOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
