#pragma once
// Internal: BatchNorm followed by ReLU as one op, what nn::Sequential runs for a BatchNorm layer directly followed
// by a ReLU layer. One pass writes relu(batch_norm(x)) (the ReLU forward pass and its tape record go away). The
// backward saves no output: it recomputes ReLU's input from the saved input with the forward's coefficients and
// applies ReLU's mask inside BatchNorm's two backward passes (kernels/batch_norm_runs.h). The values, the
// gradients and the batch statistics are the same bits as the two ops'; unlike ReLU's, the output may be modified
// in place before backward().
#include <tapegrad/framework/ops/batch_norm.h>

namespace tapegrad::detail {

/// relu(batch_norm_train(input, weight, bias, eps).output), with that call's statistics.
BatchNormTrainResult batch_norm_train_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);

/// relu(batch_norm_eval(input, mean, var, weight, bias, eps)).
Tensor batch_norm_eval_relu(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                            const Tensor& bias, double eps);

}  // namespace tapegrad::detail
