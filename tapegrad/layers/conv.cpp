#include <tapegrad/layers/conv.h>

#include <cmath>

#include <tapegrad/framework/init.h>

namespace tapegrad::nn {

Conv2d::Conv2d(Conv2dOptions options) : Module("Conv2d"), options_(options) {
  const auto& o = options;
  if (o.in_channels < 1 || o.out_channels < 1)
    fail("Conv2d: in_channels and out_channels must be positive, got {} and {}", o.in_channels, o.out_channels);
  if (o.groups < 1 || o.in_channels % o.groups != 0 || o.out_channels % o.groups != 0)
    fail("Conv2d: groups={} must be positive and divide in_channels={} and out_channels={}", o.groups, o.in_channels,
         o.out_channels);
  if (o.kernel_size.h < 1 || o.kernel_size.w < 1)
    fail("Conv2d: kernel_size must be positive, got {}", o.kernel_size.str());
  if (o.stride.h < 1 || o.stride.w < 1) fail("Conv2d: stride must be positive, got {}", o.stride.str());
  if (o.dilation.h < 1 || o.dilation.w < 1) fail("Conv2d: dilation must be positive, got {}", o.dilation.str());
  if (o.padding.h < 0 || o.padding.w < 0) fail("Conv2d: padding must be non-negative, got {}", o.padding.str());
  if (!is_floating(o.dtype)) fail("Conv2d: dtype must be float32 or float64, got {}", dtype_name(o.dtype));
  weight = register_parameter(
      "weight", empty({o.out_channels, o.in_channels / o.groups, o.kernel_size.h, o.kernel_size.w}, o.dtype));
  if (o.bias) bias = register_parameter("bias", empty({o.out_channels}, o.dtype));
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
  reset_parameters(o.generator ? *o.generator : default_generator());
}

void Conv2d::reset_parameters(Generator& generator) {
  // Same draws in the same order as PyTorch's _ConvNd.reset_parameters: weight first, then bias.
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, generator);
  if (bias.defined()) {
    const std::int64_t fan_in = weight.size(1) * weight.size(2) * weight.size(3);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound, generator);
  }
}

Tensor Conv2d::forward(const Tensor& input) {
  input.check_defined("Conv2d");
  const std::int64_t c = options_.in_channels;
  if (input.dim() == 4 && input.size(1) != c)
    fail("Conv2d: expected input [N, {}, H, W], got {}", c, shape_string(input.shape()));
  if (input.dim() == 3 && input.size(0) != c)
    fail("Conv2d: expected unbatched input [{}, H, W], got {}", c, shape_string(input.shape()));
  if (input.dim() != 3 && input.dim() != 4)
    fail("Conv2d: expected input [N, {}, H, W] or [{}, H, W], got {}", c, c, shape_string(input.shape()));
  if (input.dtype() != weight.dtype())
    fail("Conv2d: input is {} but the layer's parameters are {} (convert one with .to())", dtype_name(input.dtype()),
         dtype_name(weight.dtype()));
  const auto& o = options_;
  auto run = [&](const Tensor& x, const Tensor& w) {
    return conv2d(x, w, bias, o.stride, o.padding, o.dilation, o.groups);
  };
  if (memory_format() != MemoryFormat::ChannelsLast) return run(input, weight);
  // After to(MemoryFormat::ChannelsLast) the op is handed the weight's channels-last copy, so the convolution
  // runs and returns channels-last as PyTorch's converted module does, while the parameter itself stays
  // row-major for the optimizers and checkpoints. A weight that is both formats at once (one input channel, or
  // a 1x1 kernel) is its own copy, so it keeps its row-major strides and the input alone decides (as in
  // libtorch after p.contiguous(ChannelsLast)).
  if (weight.is_contiguous(MemoryFormat::ChannelsLast)) return run(input, weight);
  // Note: conv2d reorders the weight into oneDNN's layout from a row-major copy, so the channels-last copy
  // would be made in every forward only to be copied back. When the input suggests channels-last (every layer
  // after the first), or does once converted (the copy conv2d would make itself), it decides the format alone
  // and the row-major weight goes in as is: same values, same output format, no weight copies.
  if (input.dim() == 4) {
    if (input.suggest_memory_format() == MemoryFormat::ChannelsLast) return run(input, weight);
    const Tensor x = input.contiguous(MemoryFormat::ChannelsLast);
    if (x.suggest_memory_format() == MemoryFormat::ChannelsLast) return run(x, weight);
  }
  return run(input, weight.contiguous(MemoryFormat::ChannelsLast));
}

std::string Conv2d::extra_repr() const {
  const auto& o = options_;
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", o.in_channels, o.out_channels, o.kernel_size.str(),
                              o.stride.str());
  if (o.padding != IntPair(0)) s += fmt::format(", padding={}", o.padding.str());
  if (o.dilation != IntPair(1)) s += fmt::format(", dilation={}", o.dilation.str());
  if (o.groups != 1) s += fmt::format(", groups={}", o.groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

std::shared_ptr<Module> Conv2d::clone() const {
  // Note: clone_into overwrites every value, so the fresh layer draws its throwaway init from a local
  // generator instead of advancing the caller's random stream.
  Generator scratch;
  Conv2dOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<Conv2d>(options));
}

}  // namespace tapegrad::nn
