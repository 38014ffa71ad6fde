#pragma once
/// nn::ConvTranspose2d: a 2-d transposed convolution layer over [N, C, H, W], with PyTorch's options and default
/// initialisation.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/conv_transpose.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for ConvTranspose2d, with PyTorch's names and defaults
/// (`ConvTranspose2dOptions{64, 32, 4}.with_stride(2).with_padding(1)`).
struct ConvTranspose2dOptions {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  IntPair kernel_size = 1;
  IntPair stride = 1;
  IntPair padding = 0;
  /// Extra rows and columns on the bottom and right of the output (smaller than stride).
  IntPair output_padding = 0;
  std::int64_t groups = 1;
  bool bias = true;
  IntPair dilation = 1;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  ConvTranspose2dOptions& with_stride(IntPair s) { stride = s; return *this; }
  ConvTranspose2dOptions& with_padding(IntPair p) { padding = p; return *this; }
  ConvTranspose2dOptions& with_output_padding(IntPair p) { output_padding = p; return *this; }
  ConvTranspose2dOptions& with_groups(std::int64_t g) { groups = g; return *this; }
  ConvTranspose2dOptions& with_bias(bool on) { bias = on; return *this; }
  ConvTranspose2dOptions& with_dilation(IntPair d) { dilation = d; return *this; }
  ConvTranspose2dOptions& with_dtype(DType d) { dtype = d; return *this; }
  ConvTranspose2dOptions& with_generator(Generator& g) { generator = &g; return *this; }
};

/// Transposed convolution with weight [in_channels, out_channels/groups, kh, kw] (PyTorch's layout: input
/// channels first) and optional bias [out_channels]. Output extent (H - 1)*stride - 2*padding +
/// dilation*(kh - 1) + output_padding + 1.
/// Note: initialised as PyTorch does: kaiming_uniform_ with a = sqrt(5) and bias ~ U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in)), where fan_in is computed from the weight as PyTorch does, i.e. from its dim 1:
/// out_channels/groups * kh * kw.
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(ConvTranspose2dOptions options);
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, IntPair kernel_size)
      : ConvTranspose2d(ConvTranspose2dOptions{in_channels, out_channels, kernel_size}) {}

  /// [N, in_channels, H, W] (or [in_channels, H, W]) -> [N, out_channels, OH, OW].
  Tensor forward(const Tensor& input) override;
  /// "64, 32, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)" as PyTorch prints it.
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  /// The options the layer was built with (generator cleared).
  const ConvTranspose2dOptions& options() const { return options_; }
  /// Redraws weight and bias with PyTorch's default scheme.
  void reset_parameters(Generator& generator = default_generator());

  Tensor weight;
  /// Undefined when built with bias = false.
  Tensor bias;

 private:
  ConvTranspose2dOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
