#pragma once
/// Shape ops: moving, joining, cutting and indexing dims. All are differentiable in their floating inputs.
/// Note: transpose, permute, flatten (when the strides allow), squeeze, unsqueeze, slice, narrow, select and
/// expand return views: tensors sharing x's storage with other strides and offset, as in PyTorch, so an
/// in-place op on one is seen through the other. cat, stack, index_select, gather and the *_add ops copy
/// into fresh contiguous tensors.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Swaps dims d0 and d1 (negative counts from the end).
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
/// Reorders dims: result dim i is x's dim `dims[i]`; `dims` must be a permutation.
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
/// Merges dims start_dim..end_dim (inclusive) into one; a 0-dim tensor becomes [1]. Shares storage.
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
/// Removes every dim of extent 1. Shares storage.
Tensor squeeze(const Tensor& x);
/// Removes `dim` when its extent is 1; otherwise returns the same shape. Shares storage.
Tensor squeeze(const Tensor& x, std::int64_t dim);
/// Inserts a dim of extent 1 at `dim`, in [-(ndim+1), ndim]. Shares storage.
Tensor unsqueeze(const Tensor& x, std::int64_t dim);
/// Joins tensors along an existing dim; all other extents and the dtype must match.
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
/// Joins same-shape tensors along a new dim inserted at `dim`, in [-(ndim+1), ndim].
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
/// Elements start, start+step, ... below end along `dim`. Negative start/end count from the end and both
/// are clamped to [0, size] as in Python slicing; step must be positive.
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1);
/// `length` elements from `start` along `dim` (negative start counts from the end); must fit.
Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length);
/// The slice at `index` along `dim` (negative counts from the end), with that dim removed. A view.
Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index);
/// x repeated along dims of extent 1 (and new leading dims) to `sizes` without copying: the repeated dims
/// get stride 0. -1 keeps an extent. A view; in-place ops other than fill_ on it are refused.
Tensor expand(const Tensor& x, const Shape& sizes);
/// Picks the entries `index` (1-D int64, each in [0, size)) along `dim`.
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
/// x with source's slices added at rows `index` along `dim` (repeats accumulate). Out of place.
Tensor index_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source);
/// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (likewise for other dims); index is int64 of x's rank.
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
/// x with src[i][j][k] added at x[i][index[i][j][k]][k] for dim 1 (repeats accumulate). Out of place.
Tensor scatter_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace tapegrad

TAPEGRAD_API_END
