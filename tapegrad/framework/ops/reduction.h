#pragma once
/// Reductions over all or chosen dims, and the broadcast/sum-to pair that broadcasting gradients use.
/// Note: as in PyTorch, sum, prod, max/min, amax/amin, argmax/argmin and count_nonzero also take int64
/// tensors and give int64 results (sums and products wrap around modulo 2^64, as PyTorch's); mean, var and
/// std_dev refuse them (convert with .to(DType::Float32) first). Integer results are never differentiable.
#include <tapegrad/export.h>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Sum of all elements (0-dim result; int64 for an int64 tensor).
Tensor sum(const Tensor& x);
/// Sum over `dims` (negative allowed); keepdim leaves them as size 1.
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Mean of all elements.
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Product of all elements (0-dim; 1 for an empty tensor). Gradient: the product of the other elements
/// (exact where some are 0, as PyTorch's).
Tensor prod(const Tensor& x);
/// Product along one dim (PyTorch's prod takes a single dim).
Tensor prod(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// Number of non-zero elements (NaN counts), as a 0-dim int64 tensor; any dtype.
Tensor count_nonzero(const Tensor& x);
/// Number of non-zero elements over `dims` (int64; no keepdim, as PyTorch's).
Tensor count_nonzero(const Tensor& x, const std::vector<std::int64_t>& dims);

/// The values and int64 positions of a max or min along one dim (`auto [values, indices] = max(x, 1);`).
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};

/// Largest element (0-dim). Gradient: shared evenly between tied maxima, as PyTorch's max().
Tensor max(const Tensor& x);
/// Largest element along `dim` and its index; the gradient goes to that index (the first maximum).
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x);
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// Maximum over `dims`; the gradient is shared evenly between tied maxima (PyTorch's amax).
Tensor amax(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Index (int64) of the first maximum along `dim`.
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// Index (int64, 0-dim) of the first maximum of the flattened tensor.
Tensor argmax(const Tensor& x);
Tensor argmin(const Tensor& x);

/// Unbiased variance of all elements (divides by n - 1).
Tensor var(const Tensor& x);
/// Variance over `dims`, dividing by max(0, n - correction): correction 1 is unbiased, 0 biased (as PyTorch).
Tensor var(const Tensor& x, const std::vector<std::int64_t>& dims, std::int64_t correction = 1, bool keepdim = false);
/// Standard deviation, sqrt(var) (libtorch's torch::std; renamed to stay clear of namespace std).
Tensor std_dev(const Tensor& x);
Tensor std_dev(const Tensor& x, const std::vector<std::int64_t>& dims, std::int64_t correction = 1,
               bool keepdim = false);

/// Sums `x` down to `shape`, which must broadcast to x's shape: the gradient of a broadcast input.
Tensor sum_to(const Tensor& x, const Shape& shape);
/// Repeats `x` along broadcast dims to reach `shape` (NumPy rules). Differentiable (backward: sum_to).
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace tapegrad

TAPEGRAD_API_END
