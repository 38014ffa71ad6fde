#include <tapegrad/layers/linear.h>

#include <cmath>

#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/linalg.h>

namespace tapegrad::nn {

Linear::Linear(LinearOptions options) : Module("Linear"), options_(options) {
  if (options.in_features < 0 || options.out_features < 0)
    fail("Linear: in_features and out_features must be non-negative, got {} and {}", options.in_features,
         options.out_features);
  if (!is_floating(options.dtype)) fail("Linear: dtype must be float32 or float64, got {}", dtype_name(options.dtype));
  weight = register_parameter("weight", empty({options.out_features, options.in_features}, options.dtype));
  if (options.bias) bias = register_parameter("bias", empty({options.out_features}, options.dtype));
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
  reset_parameters(options.generator ? *options.generator : default_generator());
}

void Linear::reset_parameters(Generator& generator) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, generator);
  if (bias.defined()) {
    const std::int64_t fan_in = options_.in_features;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound, generator);
  }
}

Tensor Linear::forward(const Tensor& input) {
  input.check_defined("Linear");
  if (input.dim() < 1 || input.size(-1) != options_.in_features)
    fail("Linear: expected input [..., {}], got {}", options_.in_features, shape_string(input.shape()));
  if (input.dtype() != weight.dtype())
    fail("Linear: input is {} but the layer's parameters are {} (convert one with .to())", dtype_name(input.dtype()),
         dtype_name(weight.dtype()));
  return linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", options_.in_features, options_.out_features,
                     bias.defined());
}

std::shared_ptr<Module> Linear::clone() const {
  // Note: clone_into overwrites every value, so the fresh layer draws its throwaway init from a local
  // generator instead of advancing the caller's random stream.
  Generator scratch;
  LinearOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<Linear>(options));
}

}  // namespace tapegrad::nn
