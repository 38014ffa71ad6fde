#include <tapegrad/layers/loss.h>

namespace tapegrad::nn {

// Note: the weights are registered as buffers (so to() converts them and state() saves them, as in PyTorch);
// forward reads them back from the registry, so the ops see converted or loaded values.
BCELoss::BCELoss(BceOptions options) : Module("BCELoss"), options_(std::move(options)) {
  if (options_.weight.defined()) options_.weight = register_buffer("weight", options_.weight.detach());
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  BceOptions options = options_;
  if (options.weight.defined()) options.weight = buffer("weight");
  return binary_cross_entropy(input, target, options);
}

std::shared_ptr<Module> BCELoss::clone() const {
  BceOptions options = options_;
  if (options.weight.defined()) options.weight = options.weight.clone();
  return clone_into(std::make_shared<BCELoss>(options));
}

BCEWithLogitsLoss::BCEWithLogitsLoss(BceWithLogitsOptions options)
    : Module("BCEWithLogitsLoss"), options_(std::move(options)) {
  if (options_.weight.defined()) options_.weight = register_buffer("weight", options_.weight.detach());
  if (options_.pos_weight.defined()) options_.pos_weight = register_buffer("pos_weight", options_.pos_weight.detach());
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  BceWithLogitsOptions options = options_;
  if (options.weight.defined()) options.weight = buffer("weight");
  if (options.pos_weight.defined()) options.pos_weight = buffer("pos_weight");
  return binary_cross_entropy_with_logits(input, target, options);
}

std::shared_ptr<Module> BCEWithLogitsLoss::clone() const {
  BceWithLogitsOptions options = options_;
  if (options.weight.defined()) options.weight = options.weight.clone();
  if (options.pos_weight.defined()) options.pos_weight = options.pos_weight.clone();
  return clone_into(std::make_shared<BCEWithLogitsLoss>(options));
}

NLLLoss::NLLLoss(CrossEntropyOptions options) : Module("NLLLoss"), options_(options) {}

Tensor NLLLoss::forward(const Tensor& log_probs, const Tensor& labels) { return nll_loss(log_probs, labels, options_); }

std::shared_ptr<Module> NLLLoss::clone() const { return clone_into(std::make_shared<NLLLoss>(options_)); }

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions options) : Module("CrossEntropyLoss"), options_(options) {}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& labels) {
  return cross_entropy(logits, labels, options_);
}

std::shared_ptr<Module> CrossEntropyLoss::clone() const {
  return clone_into(std::make_shared<CrossEntropyLoss>(options_));
}

}  // namespace tapegrad::nn
