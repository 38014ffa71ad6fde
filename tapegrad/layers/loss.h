#pragma once
/// Loss modules with libtorch's names: nn::BCELoss, nn::BCEWithLogitsLoss, nn::NLLLoss, nn::CrossEntropyLoss. Each
/// holds its options (and its weight tensors as buffers, as PyTorch) and is called with (input, target).
#include <tapegrad/export.h>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/loss.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Binary cross-entropy on probabilities (binary_cross_entropy): the loss of a Sigmoid output.
/// A defined options.weight becomes the buffer "weight".
class BCELoss : public Module {
 public:
  explicit BCELoss(BceOptions options = {});
  /// The loss of probabilities `input` against `target` of the same shape.
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;
  const BceOptions& options() const { return options_; }

 private:
  // Note: a loss takes two tensors; Module's one-tensor forward stays unreachable (private), named here so
  // that it is not merely hidden (clang's -Woverloaded-virtual).
  using Module::forward;
  BceOptions options_;
};

/// Binary cross-entropy on logits (binary_cross_entropy_with_logits, numerically stable). Defined
/// options.weight and options.pos_weight become the buffers "weight" and "pos_weight".
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(BceWithLogitsOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;
  const BceWithLogitsOptions& options() const { return options_; }

 private:
  // Note: a loss takes two tensors; Module's one-tensor forward stays unreachable (private), named here so
  // that it is not merely hidden (clang's -Woverloaded-virtual).
  using Module::forward;
  BceWithLogitsOptions options_;
};

/// Negative log-likelihood of log-probabilities [N, C] (e.g. log_softmax output) against int64 labels [N].
class NLLLoss : public Module {
 public:
  explicit NLLLoss(CrossEntropyOptions options = {});
  Tensor forward(const Tensor& log_probs, const Tensor& labels);
  Tensor operator()(const Tensor& log_probs, const Tensor& labels) { return forward(log_probs, labels); }
  std::shared_ptr<Module> clone() const override;
  const CrossEntropyOptions& options() const { return options_; }

 private:
  // Note: a loss takes two tensors; Module's one-tensor forward stays unreachable (private), named here so
  // that it is not merely hidden (clang's -Woverloaded-virtual).
  using Module::forward;
  CrossEntropyOptions options_;
};

/// Cross-entropy of logits [N, C] against int64 labels [N] (log_softmax and NLL, fused).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});
  Tensor forward(const Tensor& logits, const Tensor& labels);
  Tensor operator()(const Tensor& logits, const Tensor& labels) { return forward(logits, labels); }
  std::shared_ptr<Module> clone() const override;
  const CrossEntropyOptions& options() const { return options_; }

 private:
  // Note: a loss takes two tensors; Module's one-tensor forward stays unreachable (private), named here so
  // that it is not merely hidden (clang's -Woverloaded-virtual).
  using Module::forward;
  CrossEntropyOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
