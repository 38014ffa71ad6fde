#pragma once
/// Comparisons returning masks, and selection by mask (where, masked_fill).
/// Note: tapegrad has no bool dtype (docs/integer_tensors.md says why). A mask is a tensor of its inputs' dtype
/// holding 1 and 0; comparisons never require grad. Ops that take a mask accept any dtype and treat non-zero
/// as true. An int64 mask sums to an int64 count (`pred.eq(target).sum().item<std::int64_t>()`), a float mask
/// to a float one; in an index list an int64 mask is read as indices, so wrap it in indexing::Mask.
#include <tapegrad/export.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

// ---- comparisons (same dtype on both sides, shapes broadcast; float32, float64 or int64) ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

/// a where mask is non-zero, b elsewhere; mask, a and b broadcast together. Differentiable in a and b.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);
/// x with `value` where mask is non-zero; mask must broadcast to x's shape. Differentiable in x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace tapegrad

TAPEGRAD_API_END
