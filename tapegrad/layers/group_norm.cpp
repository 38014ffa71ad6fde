// GroupNorm: a reshape to [N, G, C/G * spatial], the fused layer_norm over the last dim, and the per-channel affine.
#include <tapegrad/layers/group_norm.h>

#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/layer_norm.h>

namespace tapegrad::nn {

GroupNorm::GroupNorm(GroupNormOptions options) : Module("GroupNorm"), options_(options) {
  if (options_.num_groups < 1) fail("GroupNorm: num_groups must be positive, got {}", options_.num_groups);
  if (options_.num_channels < 1) fail("GroupNorm: num_channels must be positive, got {}", options_.num_channels);
  if (options_.num_channels % options_.num_groups != 0)
    fail("GroupNorm: num_channels must be divisible by num_groups, got num_channels={} and num_groups={}",
         options_.num_channels, options_.num_groups);
  if (!(options_.eps > 0.0)) fail("GroupNorm: eps must be positive, got {}", options_.eps);
  if (!is_floating(options_.dtype))
    fail("GroupNorm: dtype must be float32 or float64, got {}", dtype_name(options_.dtype));
  if (options_.affine) {
    const TensorOptions tensor_options = TensorOptions{}.with_dtype(options_.dtype);
    weight = register_parameter("weight", ones({options_.num_channels}, tensor_options));
    bias = register_parameter("bias", zeros({options_.num_channels}, tensor_options));
  }
}

Tensor GroupNorm::forward(const Tensor& input) {
  input.check_defined("GroupNorm");
  const Shape& s = input.shape();
  if (input.dim() < 2)
    fail("GroupNorm: expected input [N, C, *] with at least 2 dims, got {}", shape_string(s));
  if (s[1] != options_.num_channels)
    fail("GroupNorm: expected {} channels, got input {}", options_.num_channels, shape_string(s));
  if (!is_floating(input.dtype()))
    fail("GroupNorm: expected a float32 or float64 input, got {}", dtype_name(input.dtype()));
  if (weight.defined() && input.dtype() != weight.dtype())
    fail("GroupNorm: input {} is {} but the layer is {} (convert the model with to())", shape_string(s),
         dtype_name(input.dtype()), dtype_name(weight.dtype()));
  const std::int64_t n = s[0], groups = options_.num_groups;
  if (input.numel() == 0) return input.clone();  // nothing to normalise; keeps the shape and the graph
  const std::int64_t per_group = input.numel() / (n * groups);
  // Note: each group's values are contiguous in [N, C, *] (channels are grouped consecutively), so the
  // reshape shares storage and layer_norm over the last dim takes each (sample, group) as one row.
  Tensor y = layer_norm(input.reshape({n, groups, per_group}), {per_group}, Tensor(), Tensor(), options_.eps).reshape(s);
  if (!options_.affine) return y;
  Shape channel(s.size(), 1);
  channel[1] = options_.num_channels;
  return add(mul(y, weight.reshape(channel)), bias.reshape(channel));
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", options_.num_groups, options_.num_channels, options_.eps,
                     options_.affine);
}

std::shared_ptr<Module> GroupNorm::clone() const { return clone_into(std::make_shared<GroupNorm>(options_)); }

}  // namespace tapegrad::nn
