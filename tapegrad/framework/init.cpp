// Initialisers: a bound or a standard deviation from the tensor's fans, then one fill from the generator.
#include <tapegrad/framework/init.h>

#include <cmath>
#include <string>

#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad::init {

namespace {

// Note: the fresh values are drawn in float64 and converted, so float32 and float64 parameters initialised
// from the same seed agree up to rounding; copy_ writes in place, keeping the parameter's identity.
Tensor overwrite(Tensor tensor, const Tensor& values, const char* op) {
  tensor.check_defined(op);
  if (!is_floating(tensor.dtype()))
    fail("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(tensor.dtype()));
  NoGradGuard no_grad;
  tensor.copy_(values.to(tensor.dtype()));
  return tensor;
}

std::int64_t fan_for(const Tensor& tensor, FanMode mode, const char* op) {
  tensor.check_defined(op);
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const std::int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  // Note: PyTorch warns and leaves the tensor alone for zero-element tensors; a zero fan elsewhere would
  // divide by zero, so it is an error here.
  if (fan == 0 && tensor.numel() > 0) fail("{}: fan is 0 for a tensor of shape {}", op, shape_string(tensor.shape()));
  return fan;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU:
      return 3.0 / 4.0;  // PyTorch's choice for self-normalising networks
  }
  fail("calculate_gain: unknown nonlinearity");
}

double calculate_gain(std::string_view nonlinearity, double param) {
  static constexpr std::string_view linear_names[] = {
      "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"};
  for (std::string_view name : linear_names)
    if (nonlinearity == name) return calculate_gain(Nonlinearity::Linear, param);
  if (nonlinearity == "sigmoid") return calculate_gain(Nonlinearity::Sigmoid, param);
  if (nonlinearity == "tanh") return calculate_gain(Nonlinearity::Tanh, param);
  if (nonlinearity == "relu") return calculate_gain(Nonlinearity::ReLU, param);
  if (nonlinearity == "leaky_relu") return calculate_gain(Nonlinearity::LeakyReLU, param);
  if (nonlinearity == "selu") return calculate_gain(Nonlinearity::SELU, param);
  fail("calculate_gain: unsupported nonlinearity '{}'", std::string(nonlinearity));
}

std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  tensor.check_defined("calculate_fan_in_and_fan_out");
  if (tensor.dim() < 2)
    fail(
        "calculate_fan_in_and_fan_out: fan in and fan out cannot be computed for a tensor with fewer than 2 "
        "dimensions, got shape {}",
        shape_string(tensor.shape()));
  std::int64_t receptive_field = 1;
  for (std::int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(Tensor tensor, double low, double high, Generator& generator) {
  tensor.check_defined("uniform_");
  return overwrite(tensor, uniform(tensor.shape(), low, high, generator, TensorOptions{}.with_dtype(DType::Float64)),
                   "uniform_");
}

Tensor normal_(Tensor tensor, double mean, double std, Generator& generator) {
  tensor.check_defined("normal_");
  return overwrite(tensor, normal(tensor.shape(), mean, std, generator, TensorOptions{}.with_dtype(DType::Float64)),
                   "normal_");
}

Tensor constant_(Tensor tensor, double value) {
  tensor.check_defined("constant_");
  return overwrite(tensor, full(tensor.shape(), value, TensorOptions{}.with_dtype(DType::Float64)), "constant_");
}

Tensor zeros_(Tensor tensor) { return constant_(tensor, 0.0); }
Tensor ones_(Tensor tensor) { return constant_(tensor, 1.0); }

Tensor xavier_uniform_(Tensor tensor, double gain, Generator& generator) {
  tensor.check_defined("xavier_uniform_");
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * std;  // a uniform on [-b, b] has std b / sqrt(3)
  return uniform_(tensor, -bound, bound, generator);
}

Tensor xavier_normal_(Tensor tensor, double gain, Generator& generator) {
  tensor.check_defined("xavier_normal_");
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return normal_(tensor, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), generator);
}

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator& generator) {
  const std::int64_t fan = fan_for(tensor, mode, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound, generator);
}

Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator& generator) {
  const std::int64_t fan = fan_for(tensor, mode, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)), generator);
}

}  // namespace tapegrad::init
