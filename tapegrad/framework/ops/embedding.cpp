// Embedding, the lookup and its scatter-add backward side by side: each op's backward is the other.
#include <tapegrad/framework/ops/embedding.h>

#include <algorithm>
#include <string>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>

namespace tapegrad {

namespace {

// "[1, 2]": the position of flat element `flat` in a tensor of `shape`.
std::string position_string(const Shape& shape, std::int64_t flat) {
  Shape at(shape.size(), 0);
  for (std::size_t k = shape.size(); k-- > 0;) {
    at[k] = flat % shape[k];
    flat /= shape[k];
  }
  return shape_string(at);
}

// The validated indices: int64, each in [0, rows).
const std::int64_t* checked_indices(const Tensor& indices, std::int64_t rows, const char* op) {
  indices.check_defined(op);
  if (indices.dtype() != DType::Int64)
    fail("{}: indices must be an int64 tensor, got {} of shape {}", op, dtype_name(indices.dtype()),
         shape_string(indices.shape()));
  const std::int64_t* idx = indices.data<std::int64_t>();
  for (std::int64_t e = 0; e < indices.numel(); ++e)
    if (idx[e] < 0 || idx[e] >= rows)
      fail("{}: index {} at position {} of indices {} is out of range for {} embeddings (expected [0, {}))", op,
           idx[e], position_string(indices.shape(), e), shape_string(indices.shape()), rows, rows);
  return idx;
}

std::int64_t checked_padding(std::optional<std::int64_t> padding_idx, std::int64_t rows, const char* op) {
  if (!padding_idx) return -1;
  if (*padding_idx < 0 || *padding_idx >= rows)
    fail("{}: padding_idx {} must be in [0, {}) (num_embeddings = {})", op, *padding_idx, rows, rows);
  return *padding_idx;
}

Shape with_row(const Shape& indices_shape, std::int64_t dim) {
  Shape out = indices_shape;
  out.push_back(dim);
  return out;
}

Tensor lookup(const Tensor& weight, const Tensor& indices, std::int64_t padding, bool zero_padding, const char* op);

// out[idx[e]] += grad[e] for every position e whose index is not `padding`.
Tensor scatter_rows(const Tensor& grad, const Tensor& indices, std::int64_t rows, std::int64_t padding,
                    const char* op) {
  grad.check_defined(op);
  const std::int64_t* idx = checked_indices(indices, rows, op);
  if (grad.dim() != indices.dim() + 1 || !std::equal(indices.shape().begin(), indices.shape().end(), grad.shape().begin()))
    fail("{}: grad {} must have shape indices.shape + [embedding_dim] for indices {}", op, shape_string(grad.shape()),
         shape_string(indices.shape()));
  const std::int64_t dim = grad.shape().back();
  Tensor out = zeros({rows, dim}, TensorOptions{}.with_dtype(grad.dtype()));
  detail::dispatch_floating(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = grad.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t e = 0; e < indices.numel(); ++e) {
      if (idx[e] == padding) continue;
      T* row = dst + idx[e] * dim;
      const T* from = src + e * dim;
      for (std::int64_t j = 0; j < dim; ++j) row[j] += from[j];
    }
  });
  return record_if_needed("embedding_backward", out, {grad}, [&] {
    return [saved = SavedTensor(indices, "embedding_backward"), padding](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{lookup(g, saved.get(), padding, /*zero_padding=*/true, "embedding_backward_backward")};
    };
  });
}

// out[e] = weight[idx[e]] (zero where idx[e] is `padding` when zero_padding). Its backward scatters back,
// skipping `padding` either way: with zero_padding the adjoint exactly, without it PyTorch's padding rule.
Tensor lookup(const Tensor& weight, const Tensor& indices, std::int64_t padding, bool zero_padding, const char* op) {
  weight.check_defined(op);
  if (weight.dim() != 2)
    fail("{}: weight must be 2-D [num_embeddings, embedding_dim], got {}", op, shape_string(weight.shape()));
  if (!is_floating(weight.dtype()))
    fail("{}: weight must be float32 or float64, got {}", op, dtype_name(weight.dtype()));
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  const std::int64_t* idx = checked_indices(indices, rows, op);
  Tensor out = empty(with_row(indices.shape(), dim), weight.dtype());
  detail::dispatch_floating(weight.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = weight.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t e = 0; e < indices.numel(); ++e) {
      if (zero_padding && idx[e] == padding)
        std::fill_n(dst + e * dim, dim, T(0));
      else
        std::copy_n(src + idx[e] * dim, dim, dst + e * dim);
    }
  });
  if (trace::active()) trace::annotate(out, {{"indices", indices}});
  return record_if_needed(op, out, {weight}, [&] {
    return [saved = SavedTensor(indices, op), padding, rows](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{scatter_rows(g, saved.get(), rows, padding, "embedding_backward")};
    };
  });
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx) {
  weight.check_defined("embedding");
  const std::int64_t rows = weight.dim() == 2 ? weight.size(0) : 0;
  if (weight.dim() != 2)
    fail("embedding: weight must be 2-D [num_embeddings, embedding_dim], got {}", shape_string(weight.shape()));
  indices.check_defined("embedding");
  return lookup(weight.contiguous(), indices.contiguous(), checked_padding(padding_idx, rows, "embedding"),
                /*zero_padding=*/false, "embedding");
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, std::int64_t num_embeddings,
                          std::optional<std::int64_t> padding_idx) {
  if (num_embeddings < 0) fail("embedding_backward: num_embeddings must be non-negative, got {}", num_embeddings);
  grad.check_defined("embedding_backward");
  if (!is_floating(grad.dtype()))
    fail("embedding_backward: grad must be float32 or float64, got {}", dtype_name(grad.dtype()));
  indices.check_defined("embedding_backward");
  return scatter_rows(grad.contiguous(), indices.contiguous(), num_embeddings, checked_padding(padding_idx, num_embeddings, "embedding_backward"),
                      "embedding_backward");
}

}  // namespace tapegrad
