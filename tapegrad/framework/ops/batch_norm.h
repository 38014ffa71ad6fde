#pragma once
/// Fused BatchNorm kernels over [N, C], [N, C, L] and [N, C, H, W]: training and eval forward, one tape record each.
#include <tapegrad/export.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// A training forward's output and the per-channel batch statistics it normalized with.
/// Note: only `output` is on the tape. The statistics are plain [C] tensors (never requiring grad) for the
/// running-statistics update, which happens outside the graph.
struct BatchNormTrainResult {
  /// (x - mean) / sqrt(var + eps) * weight + bias, same shape as the input.
  Tensor output;
  /// Per-channel batch mean, [C].
  Tensor mean;
  /// Per-channel biased variance var_sum / n, [C]: what the output was normalized with.
  Tensor var;
  /// Per-channel unbiased variance var_sum / (n - 1), [C]: what the running variance is updated with.
  Tensor unbiased_var;
};

/// Training-mode BatchNorm with batch statistics over every dim but dim 1 (n = numel / C values per channel).
/// `weight` and `bias` ([C]) may be undefined (no affine). Differentiable in input, weight and bias, to any order.
/// Throws PyTorch's "Expected more than 1 value per channel when training, got input size [...]" when n == 1.
BatchNormTrainResult batch_norm_train(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);

/// Eval-mode BatchNorm with given per-channel statistics (the running ones), treated as constants:
/// (x - mean) / sqrt(var + eps) * weight + bias. Differentiable in input, weight and bias, to any order.
Tensor batch_norm_eval(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                       const Tensor& bias, double eps);

}  // namespace tapegrad

TAPEGRAD_API_END
