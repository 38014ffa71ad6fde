#pragma once
/// Cutting a tensor into pieces along a dim: split, split with sizes, chunk and unbind, as in PyTorch.
/// Note: every piece is a view of x (a narrow or a select), sharing its storage, so an in-place write
/// through a piece shows in x, as in PyTorch. Each piece records its own backward (a slice's).
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Pieces of `split_size` elements along `dim` (the last one smaller when the size does not divide), as
/// torch.split with an int. split_size 0 is allowed only for a dim of size 0 (one empty piece).
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim = 0);
/// Pieces of the given sizes along `dim`, which must be non-negative and sum to the dim's size, as
/// torch.split with a list (torch.split_with_sizes).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& split_sizes, std::int64_t dim = 0);
/// `chunks` pieces (chunks > 0) of ceil(size / chunks) elements along `dim`, the last one smaller, as
/// torch.chunk; fewer pieces when fewer suffice (a size of 5 in 4 chunks gives 2, 2, 1).
std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim = 0);
/// The slices of x along `dim`, that dim removed, as torch.unbind.
std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim = 0);

}  // namespace tapegrad

TAPEGRAD_API_END
