// InstanceNorm layers: each (sample, channel) plane as one channel of the fused BatchNorm kernels, the
// per-channel affine after it, and the running-statistics update averaged over the batch, as PyTorch does.
#include <tapegrad/layers/instance_norm.h>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad::nn {

InstanceNormBase::InstanceNormBase(std::string type_name, int spatial_dims, const InstanceNormOptions& options)
    : Module(std::move(type_name)), options_(options), spatial_dims_(spatial_dims) {
  if (options_.num_features < 1)
    fail("{}: num_features must be positive, got {}", this->type_name(), options_.num_features);
  if (!(options_.eps > 0.0)) fail("{}: eps must be positive, got {}", this->type_name(), options_.eps);
  if (!is_floating(options_.dtype))
    fail("{}: dtype must be float32 or float64, got {}", this->type_name(), dtype_name(options_.dtype));
  const Shape channels{options_.num_features};
  const TensorOptions tensor_options = TensorOptions{}.with_dtype(options_.dtype);
  if (options_.affine) {
    weight = register_parameter("weight", ones(channels, tensor_options));
    bias = register_parameter("bias", zeros(channels, tensor_options));
  }
  if (options_.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros(channels, tensor_options));
    running_var = register_buffer("running_var", ones(channels, tensor_options));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
  }
}

Tensor InstanceNormBase::forward(const Tensor& input) {
  input.check_defined(type_name().c_str());
  const int batched_rank = spatial_dims_ + 2;
  if (input.dim() != batched_rank && input.dim() != batched_rank - 1)
    fail("{}: expected {}-D input [C, {}] or {}-D input [N, C, {}], got {}", type_name(), batched_rank - 1,
         spatial_dims_ == 1 ? "L" : "H, W", batched_rank, spatial_dims_ == 1 ? "L" : "H, W",
         shape_string(input.shape()));
  if (!is_floating(input.dtype()))
    fail("{}: expected a float32 or float64 input, got {}", type_name(), dtype_name(input.dtype()));
  Shape batched = input.shape();
  if (input.dim() == batched_rank - 1) batched.insert(batched.begin(), 1);
  const std::int64_t n = batched[0], c = batched[1];
  // Note: PyTorch 1.13 accepts a channel count other than num_features when there is no per-channel tensor
  // to apply; with one (affine or tracked statistics) its kernel fails on the size, so it is an error here.
  if (c != options_.num_features && (options_.affine || options_.track_running_stats))
    fail("{}: expected {} channels, got input {}", type_name(), options_.num_features, shape_string(input.shape()));
  const Tensor& reference = options_.affine ? weight : running_mean;
  if (reference.defined() && input.dtype() != reference.dtype())
    fail("{}: input {} is {} but the layer is {} (convert the model with to())", type_name(),
         shape_string(input.shape()), dtype_name(input.dtype()), dtype_name(reference.dtype()));
  const Tensor x = input.reshape(batched);
  const std::int64_t planes = n * c, per_plane = planes == 0 ? 0 : x.numel() / planes;

  if (!is_training() && options_.track_running_stats) {
    if (x.numel() == 0) return input.clone();
    return batch_norm_eval(x.reshape({n, c, per_plane}), running_mean, running_var, weight, bias, options_.eps)
        .reshape(input.shape());
  }
  if (per_plane <= 1 && planes > 0)
    fail("Expected more than 1 spatial element when training, got input size {}", shape_string(input.shape()));
  if (x.numel() == 0) return input.clone();
  // Each (sample, channel) plane is one channel of a batch of one: the fused kernel's batch statistics are
  // then exactly the instance statistics.
  BatchNormTrainResult r = batch_norm_train(x.reshape({1, planes, per_plane}), Tensor(), Tensor(), options_.eps);
  Tensor y = r.output.reshape(input.shape());
  if (options_.affine) {
    Shape channel(input.shape().size(), 1);
    channel[input.dim() == batched_rank ? 1 : 0] = c;
    y = add(mul(y, weight.reshape(channel)), bias.reshape(channel));
  }
  if (is_training() && options_.track_running_stats) {
    // Note: PyTorch's rule (ATen's instance_norm updates a per-instance copy of the running statistics and
    // stores its mean over the batch), computed outside the graph from plain [N*C] statistics.
    NoGradGuard no_grad;
    const double m = options_.momentum;
    running_mean.mul_(1.0 - m).add_(mean(r.mean.reshape({n, c}), {0}), m);
    running_var.mul_(1.0 - m).add_(mean(r.unbiased_var.reshape({n, c}), {0}), m);
  }
  return y;
}

void InstanceNormBase::reset_running_stats() {
  if (!options_.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

std::string InstanceNormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", options_.num_features, options_.eps,
                     options_.momentum, options_.affine, options_.track_running_stats);
}

std::shared_ptr<Module> InstanceNorm1d::clone() const { return clone_into(std::make_shared<InstanceNorm1d>(options())); }

std::shared_ptr<Module> InstanceNorm2d::clone() const { return clone_into(std::make_shared<InstanceNorm2d>(options())); }

}  // namespace tapegrad::nn
