#pragma once
/// Layer normalisation over the trailing dims, as one fused op.
#include <tapegrad/export.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and the biased var taken over the trailing
/// dims given by `normalized_shape` (x must end with exactly those extents). weight and bias are optional
/// (undefined), of shape normalized_shape. Differentiable in x, weight and bias.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace tapegrad

TAPEGRAD_API_END
