#pragma once
/// Reductions over all or chosen dims, and the broadcast/sum-to pair that broadcasting gradients use.
#include <vector>

#include "framework/tensor.h"

namespace tapegrad {

/// Sum of all elements (0-dim result).
Tensor sum(const Tensor& x);
/// Sum over `dims` (negative allowed); keepdim leaves them as size 1.
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Mean of all elements.
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);

/// Sums `x` down to `shape`, which must broadcast to x's shape: the gradient of a broadcast input.
Tensor sum_to(const Tensor& x, const Shape& shape);
/// Repeats `x` along broadcast dims to reach `shape` (NumPy rules). Differentiable (backward: sum_to).
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace tapegrad
