#include <tapegrad/layers/pool.h>

namespace tapegrad::nn {

namespace {

// PyTorch prints a pooling size as the user gave it; an IntPair keeps no such memory, so a square
// size prints as one number and any other as a tuple.
std::string size_repr(const IntPair& p) { return p.h == p.w ? fmt::format("{}", p.h) : p.str(); }

}  // namespace

MaxPool2d::MaxPool2d(MaxPool2dOptions options) : Module("MaxPool2d"), options_(options) {
  if (options.kernel_size.h < 1 || options.kernel_size.w < 1)
    fail("MaxPool2d: kernel_size must be positive, got {}", options.kernel_size.str());
}

Tensor MaxPool2d::forward(const Tensor& input) {
  const auto& o = options_;
  if (!o.return_indices) return max_pool2d(input, o.kernel_size, o.stride, o.padding, o.dilation, o.ceil_mode);
  auto [output, indices] = forward_with_indices(input);
  last_indices_ = indices;
  return output;
}

std::pair<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& input) {
  const auto& o = options_;
  return max_pool2d_with_indices(input, o.kernel_size, o.stride, o.padding, o.dilation, o.ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  const auto& o = options_;
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", size_repr(o.kernel_size),
                     size_repr(o.stride.value_or(o.kernel_size)), size_repr(o.padding), size_repr(o.dilation),
                     o.ceil_mode);
}

std::shared_ptr<Module> MaxPool2d::clone() const { return clone_into(std::make_shared<MaxPool2d>(options_)); }

AvgPool2d::AvgPool2d(AvgPool2dOptions options) : Module("AvgPool2d"), options_(options) {
  if (options.kernel_size.h < 1 || options.kernel_size.w < 1)
    fail("AvgPool2d: kernel_size must be positive, got {}", options.kernel_size.str());
}

Tensor AvgPool2d::forward(const Tensor& input) {
  const auto& o = options_;
  return avg_pool2d(input, o.kernel_size, o.stride, o.padding, o.ceil_mode, o.count_include_pad, o.divisor_override);
}

std::string AvgPool2d::extra_repr() const {
  const auto& o = options_;
  std::string s = fmt::format("kernel_size={}, stride={}, padding={}", size_repr(o.kernel_size),
                              size_repr(o.stride.value_or(o.kernel_size)), size_repr(o.padding));
  if (o.ceil_mode) s += ", ceil_mode=true";
  if (!o.count_include_pad) s += ", count_include_pad=false";
  if (o.divisor_override) s += fmt::format(", divisor_override={}", *o.divisor_override);
  return s;
}

std::shared_ptr<Module> AvgPool2d::clone() const { return clone_into(std::make_shared<AvgPool2d>(options_)); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions options)
    : Module("AdaptiveAvgPool2d"), options_(options) {
  if (options.output_size.h < 0 || options.output_size.w < 0)
    fail("AdaptiveAvgPool2d: output_size must be non-negative, got {}", options.output_size.str());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) { return adaptive_avg_pool2d(input, options_.output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", size_repr(options_.output_size));
}

std::shared_ptr<Module> AdaptiveAvgPool2d::clone() const {
  return clone_into(std::make_shared<AdaptiveAvgPool2d>(options_));
}

}  // namespace tapegrad::nn
