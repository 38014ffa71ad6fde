#pragma once
/// Triangular masks over the last two dims: triu and tril (batched over any leading dims), as torch.triu/tril.
#include <tapegrad/export.h>
#include <cstdint>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// x with the elements below diagonal `diagonal` of each matrix (the last two dims) set to zero: element
/// (i, j) is kept when j - i >= diagonal (0 the main diagonal, > 0 above it, < 0 below). x needs >= 2 dims.
Tensor triu(const Tensor& x, std::int64_t diagonal = 0);
/// x with the elements above diagonal `diagonal` of each matrix set to zero: (i, j) is kept when
/// j - i <= diagonal. x needs >= 2 dims. Any dtype; the gradient of each is the same mask applied to g.
Tensor tril(const Tensor& x, std::int64_t diagonal = 0);

}  // namespace tapegrad

TAPEGRAD_API_END
