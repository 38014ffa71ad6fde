#pragma once
/// Loss functions with PyTorch's formulas and reductions. cross_entropy, nll_loss and
/// binary_cross_entropy_with_logits are fused ops (one tape record each before the reduction); mse_loss
/// and l1_loss are compositions of elementwise ops.
#include <tapegrad/export.h>
#include <cstdint>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// How a loss folds its per-element values: keep them (None), average (Mean) or add them up (Sum).
enum class Reduction { None, Mean, Sum };

/// Options for cross_entropy and nll_loss, with PyTorch's defaults.
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  /// Rows whose label equals this contribute nothing and are not counted by Mean.
  std::int64_t ignore_index = -100;
  /// eps in [0, 1]: the target becomes (1 - eps) * onehot + eps / C (cross_entropy only).
  double label_smoothing = 0.0;
};

/// Cross-entropy of logits [N, C] against int64 class labels [N] (softmax + negative log-likelihood, fused and
/// max-subtracted, so huge logits stay finite). Mean divides by the number of rows whose label is not
/// ignore_index (NaN when every row is ignored, as PyTorch). None gives [N] (0 for ignored rows).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& options = {});
/// -log_probs[i, labels[i]] per row, for log-probabilities [N, C] (e.g. log_softmax output); reductions as
/// cross_entropy. label_smoothing must be 0.
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, const CrossEntropyOptions& options = {});

/// (input - target)^2; shapes broadcast. Mean divides by the number of elements.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// |input - target|; shapes broadcast.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

/// Options for binary_cross_entropy (on probabilities).
struct BceOptions {
  Reduction reduction = Reduction::Mean;
  /// Optional per-element rescaling, broadcast to the input's shape.
  Tensor weight{};
};

/// -weight * (t log(x) + (1 - t) log(1 - x)) for probabilities x in [0, 1] (e.g. a sigmoid's output) and
/// targets t of the input's shape. As PyTorch, each log is clamped to >= -100, so x = 0 or 1 gives a finite
/// loss, and the input gradient weight * (x - t) / max(x (1 - x), 1e-12) stays finite. Differentiable in input,
/// target and weight. Prefer binary_cross_entropy_with_logits on logits: it is stabler.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceOptions& options = {});

/// Options for binary_cross_entropy_with_logits.
struct BceWithLogitsOptions {
  Reduction reduction = Reduction::Mean;
  /// Optional per-element rescaling, broadcast to the input's shape.
  Tensor weight{};
  /// Optional weight of the positive term, broadcast to the input's shape (usually [C]).
  Tensor pos_weight{};
};

/// PyTorch's stable form: (1 - t) x + (1 + (pos_weight - 1) t) (log1p(exp(-|x|)) + max(-x, 0)), never
/// overflowing for large |x|. target must have the input's shape; differentiable in input, target and
/// pos_weight (and weight).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

}  // namespace tapegrad

TAPEGRAD_API_END
