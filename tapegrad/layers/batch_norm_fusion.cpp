// fuse_batchnorm: folding eval-mode BatchNorm into the Conv2d or Linear before it, on a clone of the model.
#include <tapegrad/layers/batch_norm_fusion.h>

#include <cmath>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/conv.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>

namespace tapegrad::nn {

namespace {

/// `name` for messages ("<root>" for the model itself).
std::string label(const std::string& name) { return name.empty() ? std::string("<root>") : name; }

/// w' = w * s and b' = (b - mean) * s + beta, per output channel, in double; returns {w', b'} in w's dtype.
std::pair<Tensor, Tensor> fold(const Tensor& weight, const Tensor& bias, const BatchNormBase& bn) {
  const std::int64_t channels = weight.size(0), per_channel = weight.numel() / channels;
  const std::vector<double> w = weight.to_vector();
  const std::vector<double> b = bias.defined() ? bias.to_vector() : std::vector<double>(channels, 0.0);
  const std::vector<double> mean = bn.running_mean.to_vector(), var = bn.running_var.to_vector();
  const std::vector<double> gamma = bn.weight.defined() ? bn.weight.to_vector() : std::vector<double>(channels, 1.0);
  const std::vector<double> beta = bn.bias.defined() ? bn.bias.to_vector() : std::vector<double>(channels, 0.0);
  std::vector<double> folded_w(w.size()), folded_b(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<std::size_t>(c);
    const double scale = gamma[k] / std::sqrt(var[k] + bn.options().eps);
    for (std::int64_t i = 0; i < per_channel; ++i) {
      const auto at = static_cast<std::size_t>(c * per_channel + i);
      folded_w[at] = w[at] * scale;
    }
    folded_b[k] = (b[k] - mean[k]) * scale + beta[k];
  }
  const TensorOptions as_double = TensorOptions{}.with_dtype(DType::Float64);
  return {from_vector(folded_w, weight.shape(), as_double).to(weight.dtype()),
          from_vector(folded_b, Shape{channels}, as_double).to(weight.dtype())};
}

/// Copies the folded values into `fresh` (a layer built with a bias) and keeps `source`'s requires_grad.
void install(Module& fresh, const Tensor& source_weight, const std::pair<Tensor, Tensor>& folded) {
  NoGradGuard no_grad;
  Tensor weight = fresh.parameter("weight"), bias = fresh.parameter("bias");
  weight.copy_(folded.first);
  bias.copy_(folded.second);
  weight.requires_grad_(source_weight.requires_grad());
  bias.requires_grad_(source_weight.requires_grad());
  fresh.eval();
}

// A Conv2d or Linear with `layer`'s options plus a bias, holding `layer` folded with `bn`.
// Note: building a layer draws its initial values; a scratch generator keeps the caller's streams untouched.
template <class Layer>
std::shared_ptr<Module> fold_into(const Layer& layer, const BatchNormBase& bn) {
  Generator scratch(0);
  auto options = layer.options();
  options.bias = true;
  options.dtype = layer.weight.dtype();
  options.generator = &scratch;
  auto fused = std::make_shared<Layer>(options);
  install(*fused, layer.weight, fold(layer.weight, layer.bias, bn));
  return fused;
}

/// Folds every BatchNorm child of `sequential` (named `name`) into its predecessor, or throws why it cannot.
void fuse_in(Sequential& sequential, const std::string& name) {
  for (std::size_t i = 0; i < sequential.size(); ++i) {
    auto bn = std::dynamic_pointer_cast<BatchNormBase>(sequential.at(i));
    if (!bn) continue;
    const std::string where = name.empty() ? std::to_string(i) : name + "." + std::to_string(i);
    if (!bn->options().track_running_stats)
      fail("fuse_batchnorm: {} '{}' has track_running_stats = false: there are no running statistics to fold",
           bn->type_name(), where);
    const bool is_2d = bn->type_name() == "BatchNorm2d";
    const std::shared_ptr<Module> previous = i > 0 ? sequential.at(i - 1) : nullptr;
    auto conv = std::dynamic_pointer_cast<Conv2d>(previous);
    auto linear = std::dynamic_pointer_cast<Linear>(previous);
    if ((is_2d && !conv) || (!is_2d && !linear))
      fail("fuse_batchnorm: {} '{}' does not directly follow a {} (it follows {}); only Conv2d->BatchNorm2d and "
           "Linear->BatchNorm1d pairs can be folded",
           bn->type_name(), where, is_2d ? "Conv2d" : "Linear", previous ? previous->type_name() : "nothing");
    const Tensor& weight = is_2d ? conv->weight : linear->weight;
    if (weight.size(0) != bn->options().num_features)
      fail("fuse_batchnorm: {} '{}' has {} channels but the {} before it has {} outputs (weight {})", bn->type_name(),
           where, bn->options().num_features, previous->type_name(), weight.size(0), shape_string(weight.shape()));
    sequential.replace(i - 1, is_2d ? fold_into(*conv, *bn) : fold_into(*linear, *bn));
    auto placeholder = std::make_shared<FoldedBatchNorm>(previous->type_name());
    placeholder->eval();
    sequential.replace(i, placeholder);
  }
}

}  // namespace

std::shared_ptr<Module> fuse_batchnorm(const Module& model) {
  std::shared_ptr<Module> copy = model.clone();
  std::vector<std::pair<std::string, Sequential*>> sequentials;
  for (auto& [name, module] : copy->named_modules()) {
    if (module->is_training())
      fail("fuse_batchnorm: the model is in training mode ({} '{}'); call eval() first: folding bakes in the "
           "running statistics, which only eval mode uses",
           module->type_name(), label(name));
    if (auto* sequential = dynamic_cast<Sequential*>(module)) sequentials.emplace_back(name, sequential);
  }
  // Note: Sequentials are never replaced, only their Conv2d/Linear/BatchNorm children, so these pointers stay valid.
  for (auto& [name, sequential] : sequentials) fuse_in(*sequential, name);
  for (auto& [name, module] : copy->named_modules())
    if (dynamic_cast<BatchNormBase*>(module))
      fail("fuse_batchnorm: {} '{}' is not inside a Sequential after a Conv2d or Linear, so it cannot be folded",
           module->type_name(), label(name));
  return copy;
}

FoldedBatchNorm::FoldedBatchNorm(std::string folded_into) : Module("FoldedBatchNorm"), folded_into_(std::move(folded_into)) {}

Tensor FoldedBatchNorm::forward(const Tensor& input) {
  if (is_training())
    fail("FoldedBatchNorm: this BatchNorm was folded into the {} before it by fuse_batchnorm; the fused model is "
         "eval-only (call eval(), or train the unfused model)",
         folded_into_);
  // Note: a BatchNorm1d after a Linear normalizes dim 1, the Linear's output features, only for [N, C] input.
  if (folded_into_ == "Linear" && input.dim() != 2)
    fail("FoldedBatchNorm: the Linear->BatchNorm1d fold is exact only for [N, C] activations, got {}",
         shape_string(input.shape()));
  return input;
}

std::string FoldedBatchNorm::extra_repr() const { return "folded_into=" + folded_into_; }

std::shared_ptr<Module> FoldedBatchNorm::clone() const {
  auto copy = std::make_shared<FoldedBatchNorm>(folded_into_);
  copy->training_ = training_;
  return copy;
}

}  // namespace tapegrad::nn
