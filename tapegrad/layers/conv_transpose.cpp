#include <tapegrad/layers/conv_transpose.h>

#include <cmath>

#include <tapegrad/framework/init.h>

namespace tapegrad::nn {

ConvTranspose2d::ConvTranspose2d(ConvTranspose2dOptions options) : Module("ConvTranspose2d"), options_(options) {
  const auto& o = options;
  const char* op = "ConvTranspose2d";
  if (o.in_channels < 1 || o.out_channels < 1)
    fail("{}: in_channels and out_channels must be positive, got {} and {}", op, o.in_channels, o.out_channels);
  if (o.groups < 1 || o.in_channels % o.groups != 0 || o.out_channels % o.groups != 0)
    fail("{}: groups={} must be positive and divide in_channels={} and out_channels={}", op, o.groups, o.in_channels,
         o.out_channels);
  if (o.kernel_size.h < 1 || o.kernel_size.w < 1)
    fail("{}: kernel_size must be positive, got {}", op, o.kernel_size.str());
  if (o.stride.h < 1 || o.stride.w < 1) fail("{}: stride must be positive, got {}", op, o.stride.str());
  if (o.dilation.h < 1 || o.dilation.w < 1) fail("{}: dilation must be positive, got {}", op, o.dilation.str());
  if (o.padding.h < 0 || o.padding.w < 0) fail("{}: padding must be non-negative, got {}", op, o.padding.str());
  if (o.output_padding.h < 0 || o.output_padding.w < 0 || o.output_padding.h >= o.stride.h ||
      o.output_padding.w >= o.stride.w)
    fail("{}: output_padding {} must be non-negative and smaller than stride {}", op, o.output_padding.str(),
         o.stride.str());
  if (!is_floating(o.dtype)) fail("{}: dtype must be float32 or float64, got {}", op, dtype_name(o.dtype));
  weight = register_parameter(
      "weight", empty({o.in_channels, o.out_channels / o.groups, o.kernel_size.h, o.kernel_size.w}, o.dtype));
  if (o.bias) bias = register_parameter("bias", empty({o.out_channels}, o.dtype));
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
  reset_parameters(o.generator ? *o.generator : default_generator());
}

void ConvTranspose2d::reset_parameters(Generator& generator) {
  // Same draws in the same order as PyTorch's _ConvNd.reset_parameters: weight first, then bias; fan_in from
  // the weight's dims 1.. as PyTorch computes it (out_channels/groups * kh * kw for a transposed conv).
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, generator);
  if (bias.defined()) {
    const std::int64_t fan_in = weight.size(1) * weight.size(2) * weight.size(3);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound, generator);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  input.check_defined("ConvTranspose2d");
  const std::int64_t c = options_.in_channels;
  if (input.dim() == 4 && input.size(1) != c)
    fail("ConvTranspose2d: expected input [N, {}, H, W], got {}", c, shape_string(input.shape()));
  if (input.dim() == 3 && input.size(0) != c)
    fail("ConvTranspose2d: expected unbatched input [{}, H, W], got {}", c, shape_string(input.shape()));
  if (input.dim() != 3 && input.dim() != 4)
    fail("ConvTranspose2d: expected input [N, {}, H, W] or [{}, H, W], got {}", c, c, shape_string(input.shape()));
  if (input.dtype() != weight.dtype())
    fail("ConvTranspose2d: input is {} but the layer's parameters are {} (convert one with .to())",
         dtype_name(input.dtype()), dtype_name(weight.dtype()));
  const auto& o = options_;
  return conv_transpose2d(input, weight, bias, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  const auto& o = options_;
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", o.in_channels, o.out_channels, o.kernel_size.str(),
                              o.stride.str());
  if (o.padding != IntPair(0)) s += fmt::format(", padding={}", o.padding.str());
  if (o.output_padding != IntPair(0)) s += fmt::format(", output_padding={}", o.output_padding.str());
  if (o.dilation != IntPair(1)) s += fmt::format(", dilation={}", o.dilation.str());
  if (o.groups != 1) s += fmt::format(", groups={}", o.groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

std::shared_ptr<Module> ConvTranspose2d::clone() const {
  // Note: clone_into overwrites every value, so the throwaway init draws from a local generator.
  Generator scratch;
  ConvTranspose2dOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<ConvTranspose2d>(options));
}

}  // namespace tapegrad::nn
