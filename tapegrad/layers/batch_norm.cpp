// BatchNorm layers: the parameters/buffers split, the train/eval switch and the running-statistics update.
#include <tapegrad/layers/batch_norm.h>

#include <algorithm>
#include <limits>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/ops/activation.h>
#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/framework/ops/detail/batch_norm_relu.h>

namespace tapegrad::nn {

double keras_momentum_to_tapegrad(double keras_momentum) {
  if (!(keras_momentum >= 0.0 && keras_momentum <= 1.0))
    fail("keras_momentum_to_tapegrad: expected a momentum in [0, 1], got {}", keras_momentum);
  return 1.0 - keras_momentum;
}

BatchNormBase::BatchNormBase(std::string type_name, const BatchNormOptions& options)
    : Module(std::move(type_name)), options_(options) {
  if (options_.num_features < 1)
    fail("{}: num_features must be positive, got {}", this->type_name(), options_.num_features);
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
  frozen_flag_ = register_buffer("frozen", zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
  if (options_.frozen) freeze();
}

void BatchNormBase::freeze() {
  NoGradGuard no_grad;
  options_.frozen = true;
  frozen_flag_.fill_(1.0);
  for (Tensor* parameter : {&weight, &bias}) {
    if (!parameter->defined()) continue;
    if (parameter->requires_grad()) parameter->set_grad(Tensor());  // Note: else it would reappear on unfreeze()
    parameter->requires_grad_(false);
  }
  training_ = false;
}

void BatchNormBase::unfreeze() {
  NoGradGuard no_grad;
  options_.frozen = false;
  frozen_flag_.fill_(0.0);
  for (Tensor* parameter : {&weight, &bias})
    if (parameter->defined()) parameter->requires_grad_(true);
  training_ = requested_training_;
}

void BatchNormBase::train(bool on) {
  requested_training_ = on;
  training_ = on && !options_.frozen;
}

void BatchNormBase::after_load_state() {
  const bool loaded_frozen = frozen_flag_.item() != 0.0;
  if (loaded_frozen && !options_.frozen) freeze();
  if (!loaded_frozen && options_.frozen) unfreeze();
}

Tensor BatchNormBase::forward(const Tensor& input) { return forward_impl(input, false); }

Tensor BatchNormBase::forward_then_relu(const Tensor& input) { return forward_impl(input, true); }

Tensor BatchNormBase::forward_impl(const Tensor& input, bool relu) {
  input.check_defined(type_name().c_str());
  check_rank(input);
  if (input.size(1) != options_.num_features)
    fail("{}: expected {} channels, got input {}", type_name(), options_.num_features, shape_string(input.shape()));
  const Tensor& reference = options_.affine ? weight : running_mean;
  if (reference.defined() && input.dtype() != reference.dtype())
    fail("{}: input {} is {} but the layer is {} (convert the model with to())", type_name(),
         shape_string(input.shape()), dtype_name(input.dtype()), dtype_name(reference.dtype()));

  // Note: the fused kernels take [N, C, *] up to 4-D; a volume [N, C, D, H, W] is the same computation over
  // [N, C, D*H*W] (a reshape that shares storage), with PyTorch's message naming the caller's shape.
  const bool volume = input.dim() > 4;
  if (volume && (is_training() || !options_.track_running_stats || input_observer_) &&
      input.numel() == input.size(1))
    fail("Expected more than 1 value per channel when training, got input size {}", shape_string(input.shape()));
  const Tensor x = volume ? input.reshape({input.size(0), input.size(1), -1}) : input;
  auto shaped = [&](const Tensor& y) { return volume ? y.reshape(input.shape()) : y; };

  if (input_observer_) {
    input_observer_(input);
    const Tensor y = shaped(batch_norm_train(x, weight, bias, options_.eps).output);
    return relu ? tapegrad::relu(y) : y;
  }
  if (!is_training() && options_.track_running_stats)
    return shaped(relu ? detail::batch_norm_eval_relu(x, running_mean, running_var, weight, bias, options_.eps)
                       : batch_norm_eval(x, running_mean, running_var, weight, bias, options_.eps));
  if (is_training() && options_.track_running_stats) {
    // Note: checked before anything is computed or recorded. The count may come from a file: a negative one
    // would make the cumulative factor negative or infinite, and the largest one cannot be incremented.
    const std::int64_t count = *num_batches_tracked.data<std::int64_t>();
    if (count < 0 || count == std::numeric_limits<std::int64_t>::max())
      fail("{}: num_batches_tracked is {} (a damaged or foreign state?): it must be in [0, 2^63 - 1)", type_name(),
           count);
  }
  BatchNormTrainResult result = relu ? detail::batch_norm_train_relu(x, weight, bias, options_.eps)
                                     : batch_norm_train(x, weight, bias, options_.eps);
  if (is_training() && options_.track_running_stats) update_running_stats(result.mean, result.unbiased_var);
  return shaped(result.output);
}

// Note: PyTorch's rule, computed outside the graph. The statistics come out of the fused kernel as plain
// tensors, and the buffers change in place (bumping their version), so nothing here is ever on the tape.
void BatchNormBase::update_running_stats(const Tensor& batch_mean, const Tensor& batch_unbiased_var) {
  NoGradGuard no_grad;
  num_batches_tracked.add_(1.0);
  const double factor =
      options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(num_batches_tracked.item());
  running_mean.mul_(1.0 - factor).add_(batch_mean, factor);
  running_var.mul_(1.0 - factor).add_(batch_unbiased_var, factor);
}

void BatchNormBase::reset_running_stats() {
  if (!options_.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

std::string BatchNormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}{}", options_.num_features, options_.eps,
                     options_.momentum ? fmt::format("{}", *options_.momentum) : std::string("None"), options_.affine,
                     options_.track_running_stats, options_.frozen ? ", frozen=true" : "");
}

// Note: each step fills a key only when it is absent, so a non-strict load of a partial old state stays safe.
void BatchNormBase::upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const {
  auto fill_missing = [&](const std::string& name) {
    const std::string key = prefix + name;
    const bool present = std::any_of(state.begin(), state.end(), [&](const auto& entry) { return entry.first == key; });
    if (!present) state.emplace_back(key, zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
  };
  if (from_version < 2 && options_.track_running_stats) fill_missing("num_batches_tracked");
  if (from_version < 3) fill_missing("frozen");
}

BatchNorm1d::BatchNorm1d(const BatchNormOptions& options) : BatchNormBase("BatchNorm1d", options) {}

std::shared_ptr<Module> BatchNorm1d::clone() const { return clone_into(std::make_shared<BatchNorm1d>(options())); }

void BatchNorm1d::check_rank(const Tensor& input) const {
  if (input.dim() != 2 && input.dim() != 3)
    fail("BatchNorm1d: expected 2-D input [N, C] or 3-D input [N, C, L], got {}", shape_string(input.shape()));
}

BatchNorm2d::BatchNorm2d(const BatchNormOptions& options) : BatchNormBase("BatchNorm2d", options) {}

std::shared_ptr<Module> BatchNorm2d::clone() const { return clone_into(std::make_shared<BatchNorm2d>(options())); }

void BatchNorm2d::check_rank(const Tensor& input) const {
  if (input.dim() != 4)
    fail("BatchNorm2d: expected 4-D input [N, C, H, W], got {}", shape_string(input.shape()));
}

BatchNorm3d::BatchNorm3d(const BatchNormOptions& options) : BatchNormBase("BatchNorm3d", options) {}

std::shared_ptr<Module> BatchNorm3d::clone() const { return clone_into(std::make_shared<BatchNorm3d>(options())); }

void BatchNorm3d::check_rank(const Tensor& input) const {
  if (input.dim() != 5)
    fail("BatchNorm3d: expected 5-D input [N, C, D, H, W], got {}", shape_string(input.shape()));
}

}  // namespace tapegrad::nn
