#pragma once
/// Linear algebra: matmul with PyTorch's rules, the fused linear layer op y = x W^T + b, bmm and baddbmm.
#include <tapegrad/export.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Matrix product with torch.matmul's rules: 1-D x 1-D is a dot product (0-dim result); a 1-D first
/// argument acts as a row [1, K] and a 1-D second as a column [K, 1], the added dim then removed; with more
/// than 2 dims the leading (batch) dims broadcast, e.g. [B, N, K] x [K, M] -> [B, N, M].
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b in one fused op: x [..., in], weight [out, in], optional bias [out] -> [..., out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// Batched matrix product of two 3-D tensors, [B, N, K] x [B, K, M] -> [B, N, M], as torch.bmm: no
/// broadcasting, the batch sizes must match. Floating dtypes only (torch also takes int64).
Tensor bmm(const Tensor& batch1, const Tensor& batch2);
/// beta * input + alpha * bmm(batch1, batch2), input broadcast to [B, N, M], as torch.baddbmm. With beta 0
/// input is ignored (NaN and inf in it do not propagate) and receives no gradient.
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta = 1.0, double alpha = 1.0);

}  // namespace tapegrad

TAPEGRAD_API_END
