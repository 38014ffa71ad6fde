#include <tapegrad/layers/layer_norm.h>

#include <algorithm>

#include <tapegrad/framework/ops/layer_norm.h>

namespace tapegrad::nn {

LayerNorm::LayerNorm(LayerNormOptions options) : Module("LayerNorm"), options_(std::move(options)) {
  if (options_.normalized_shape.empty()) fail("LayerNorm: normalized_shape must have at least one dim");
  for (auto e : options_.normalized_shape)
    if (e < 0) fail("LayerNorm: normalized_shape {} has a negative extent", shape_string(options_.normalized_shape));
  if (!(options_.eps > 0.0)) fail("LayerNorm: eps must be positive, got {}", options_.eps);
  if (!is_floating(options_.dtype))
    fail("LayerNorm: dtype must be float32 or float64, got {}", dtype_name(options_.dtype));
  if (options_.elementwise_affine) {
    const TensorOptions tensor_options = TensorOptions{}.with_dtype(options_.dtype);
    weight = register_parameter("weight", ones(options_.normalized_shape, tensor_options));
    if (options_.bias) bias = register_parameter("bias", zeros(options_.normalized_shape, tensor_options));
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  input.check_defined("LayerNorm");
  const Shape& ns = options_.normalized_shape;
  const Shape& s = input.shape();
  if (s.size() < ns.size() || !std::equal(ns.begin(), ns.end(), s.end() - static_cast<std::ptrdiff_t>(ns.size())))
    fail("LayerNorm: expected input [*, {}], got {}", fmt::join(ns, ", "), shape_string(s));
  if (weight.defined() && input.dtype() != weight.dtype())
    fail("LayerNorm: input is {} but the layer's parameters are {} (convert one with .to())", dtype_name(input.dtype()),
         dtype_name(weight.dtype()));
  return layer_norm(input, ns, weight, bias, options_.eps);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("normalized_shape={}, eps={}, elementwise_affine={}{}", shape_string(options_.normalized_shape),
                     options_.eps, options_.elementwise_affine,
                     options_.elementwise_affine && !options_.bias ? ", bias=false" : "");
}

std::shared_ptr<Module> LayerNorm::clone() const { return clone_into(std::make_shared<LayerNorm>(options_)); }

}  // namespace tapegrad::nn
