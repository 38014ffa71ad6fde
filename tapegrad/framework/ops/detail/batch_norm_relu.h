#pragma once
// Internal: BatchNorm followed by ReLU as one op, what nn::Sequential runs for a BatchNorm layer directly followed
// by a ReLU layer. One pass writes relu(batch_norm(x)) (the ReLU forward pass and its tape record go away); the
// values, the gradients and the batch statistics are the same bits as the two ops'.
#include <tapegrad/framework/ops/batch_norm.h>

namespace tapegrad::detail {

/// relu(batch_norm_train(input, weight, bias, eps).output), with that call's statistics.
BatchNormTrainResult batch_norm_train_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);

/// relu(batch_norm_eval(input, mean, var, weight, bias, eps)).
Tensor batch_norm_eval_relu(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                            const Tensor& bias, double eps);

}  // namespace tapegrad::detail
