#pragma once
/// nn::Conv2d: a 2-d convolution layer over [N, C, H, W], with PyTorch's options and default initialisation.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/conv.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for Conv2d, with PyTorch's names and defaults (`Conv2dOptions{1, 32, 3}.with_padding(1)`).
struct Conv2dOptions {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  IntPair kernel_size = 1;
  IntPair stride = 1;
  IntPair padding = 0;
  IntPair dilation = 1;
  std::int64_t groups = 1;
  bool bias = true;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  Conv2dOptions& with_stride(IntPair s) { stride = s; return *this; }
  Conv2dOptions& with_padding(IntPair p) { padding = p; return *this; }
  Conv2dOptions& with_dilation(IntPair d) { dilation = d; return *this; }
  Conv2dOptions& with_groups(std::int64_t g) { groups = g; return *this; }
  Conv2dOptions& with_bias(bool on) { bias = on; return *this; }
  Conv2dOptions& with_dtype(DType d) { dtype = d; return *this; }
  Conv2dOptions& with_generator(Generator& g) { generator = &g; return *this; }
};

/// Cross-correlation with weight [out_channels, in_channels/groups, kh, kw] and optional bias [out_channels].
/// Note: initialised as PyTorch does: kaiming_uniform_ with a = sqrt(5), i.e. weight ~ U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in)) with fan_in = in_channels/groups * kh * kw, and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class Conv2d : public Module {
 public:
  explicit Conv2d(Conv2dOptions options);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, IntPair kernel_size)
      : Conv2d(Conv2dOptions{in_channels, out_channels, kernel_size}) {}

  /// [N, in_channels, H, W] (or [in_channels, H, W]) -> [N, out_channels, OH, OW].
  Tensor forward(const Tensor& input) override;
  /// "1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)" as PyTorch prints it.
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  /// The options the layer was built with (generator cleared).
  const Conv2dOptions& options() const { return options_; }
  /// Redraws weight and bias with PyTorch's default scheme.
  void reset_parameters(Generator& generator = default_generator());

  Tensor weight;
  /// Undefined when built with bias = false.
  Tensor bias;

 private:
  Conv2dOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
