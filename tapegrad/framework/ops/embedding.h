#pragma once
/// Embedding lookup and its backward, a scatter-add of rows: each is the other's adjoint.
#include <tapegrad/export.h>
#include <cstdint>
#include <optional>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// The rows of `weight` ([num_embeddings, embedding_dim], float) picked by `indices` (int64, any shape, each in
/// [0, num_embeddings)): the result has shape indices.shape + [embedding_dim]. Differentiable in weight: the
/// gradient is embedding_backward of the output's gradient. With `padding_idx` (in [0, num_embeddings)) that row
/// still takes part in the forward but receives no gradient, as in PyTorch. An index out of range throws,
/// naming the op, the index and its position.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx = std::nullopt);

/// The gradient of embedding with respect to its weight: a zero [num_embeddings, embedding_dim] tensor with row
/// `grad[i]` added at row `indices[i]` for every position i (repeats accumulate), skipping positions whose index
/// is padding_idx. `grad` has shape indices.shape + [embedding_dim]. Differentiable in grad (its own backward is
/// the lookup, with padding positions zeroed), so gradients of gradients keep flowing.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, std::int64_t num_embeddings,
                          std::optional<std::int64_t> padding_idx = std::nullopt);

}  // namespace tapegrad

TAPEGRAD_API_END
