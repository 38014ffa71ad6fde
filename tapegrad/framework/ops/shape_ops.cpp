// Layout ops: transpose, permute, flatten, squeeze, unsqueeze, cat, stack, slice, narrow, select, expand.
// The views only compute a new layout over x's storage; cat and stack copy. Each forward is followed, right
// below, by how the gradient flows back.
#include <tapegrad/framework/ops/shape_ops.h>

#include <algorithm>
#include <cstring>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

using detail::for_each_run;

std::int64_t product(const Shape& shape, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= shape[i];
  return p;
}

Tensor permute_as(const Tensor& x, const std::vector<std::int64_t>& dims, const char* op) {
  const Shape strides = x.strides();
  Shape shape(dims.size()), view_strides(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    shape[i] = x.shape()[static_cast<std::size_t>(dims[i])];
    view_strides[i] = strides[static_cast<std::size_t>(dims[i])];
  }
  Tensor out = detail::make_view(x, shape, view_strides, x.storage_offset());
  if (trace::active()) trace::annotate(out, {{"perm", dims}});
  return record_if_needed(op, out, {x}, [&] {
    std::vector<std::int64_t> inverse(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) inverse[static_cast<std::size_t>(dims[i])] = static_cast<std::int64_t>(i);
    return [inverse](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{permute(g, inverse)}; };
  });
}

// A view that only relabels dims of extent 1 (squeeze, unsqueeze); its gradient is g reshaped back.
Tensor relabel_view(const Tensor& x, Shape shape, Shape strides, const char* op) {
  Tensor out = detail::make_view(x, std::move(shape), std::move(strides), x.storage_offset());
  return record_if_needed(op, out, {x}, [&] {
    return [original = x.shape()](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g.reshape(original)}; };
  });
}

// The gradient of slice: zeros of the input's shape with g written into the sliced positions.
// Note: an op of its own (not a raw kernel) so that its backward, a slice, keeps double backward working.
Tensor slice_backward(const Tensor& g_in, const Shape& input_shape, std::size_t dim, std::int64_t start,
                      std::int64_t step) {
  const Tensor g = g_in.contiguous();
  Tensor out = zeros(input_shape, TensorOptions{}.with_dtype(g.dtype()));
  Shape strides = contiguous_strides(input_shape);
  const std::int64_t base = start * strides[dim];
  strides[dim] *= step;
  detail::dispatch_floating(g.dtype(), "slice_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* src = g.data<T>();
    T* dst = out.data<T>();
    for_each_run(g.shape(), strides, base, [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t st) {
      for (std::int64_t k = 0; k < inner; ++k) dst[s + k * st] = src[o + k];
    });
  });
  const std::int64_t end = start + step * g.shape()[dim];
  return record_if_needed("slice_backward", out, {g}, [&] {
    return [dim, start, end, step](const Tensor& gg, NeedsGrad) {
      return std::vector<Tensor>{slice(gg, static_cast<std::int64_t>(dim), start, end, step)};
    };
  });
}

void check_list(const std::vector<Tensor>& tensors, const char* op) {
  if (tensors.empty()) fail("{}: expected a non-empty list of tensors", op);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) fail("{}: tensor at position {} is undefined", op, i);
    if (tensors[i].dtype() != tensors[0].dtype())
      fail("{}: dtype mismatch, {} at position 0 and {} at position {}", op, dtype_name(tensors[0].dtype()),
           dtype_name(tensors[i].dtype()), i);
  }
}

// Copies each input's `outer` blocks of chunk[i] elements side by side into `out`.
void join_blocks(const std::vector<Tensor>& tensors, const std::vector<std::int64_t>& chunks, std::int64_t outer,
                 Tensor& out) {
  const std::size_t element = element_size(out.dtype());
  std::int64_t out_chunk = 0;
  for (auto c : chunks) out_chunk += c;
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor values = detail::contiguous_values(tensors[i]);
    const auto* src = static_cast<const unsigned char*>(values.raw_data());
    const auto bytes = static_cast<std::size_t>(chunks[i]) * element;
    if (bytes > 0)
      for (std::int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + static_cast<std::size_t>(o * out_chunk + offset) * element,
                    src + static_cast<std::size_t>(o) * bytes, bytes);
    offset += chunks[i];
  }
}

// Note: a record holds at most 64 inputs; longer lists that need a gradient are joined in groups of 64.
constexpr std::size_t max_record_inputs = 64;

}  // namespace

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  x.check_defined("transpose");
  const std::int64_t a = normalize_dim(d0, x.dim(), "transpose"), b = normalize_dim(d1, x.dim(), "transpose");
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(i);
  if (x.dim() > 0) std::swap(dims[static_cast<std::size_t>(a)], dims[static_cast<std::size_t>(b)]);
  return permute_as(x, dims, "transpose");
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  x.check_defined("permute");
  if (static_cast<std::int64_t>(dims.size()) != x.dim())
    fail("permute: expected {} dims for a tensor of shape {}, got {}", x.dim(), shape_string(x.shape()),
         shape_string(dims));
  std::vector<std::int64_t> normalized(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    normalized[i] = normalize_dim(dims[i], x.dim(), "permute");
    if (seen[static_cast<std::size_t>(normalized[i])])
      fail("permute: dim {} repeats in {}", dims[i], shape_string(dims));
    seen[static_cast<std::size_t>(normalized[i])] = true;
  }
  return permute_as(x, normalized, "permute");
}

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  x.check_defined("flatten");
  const std::int64_t start = normalize_dim(start_dim, x.dim(), "flatten");
  const std::int64_t end = normalize_dim(end_dim, x.dim(), "flatten");
  if (start > end) fail("flatten: start_dim {} cannot come after end_dim {}", start_dim, end_dim);
  if (x.dim() == 0) return x.reshape({1});
  const Shape& s = x.shape();
  Shape shape(s.begin(), s.begin() + start);
  shape.push_back(product(s, static_cast<std::size_t>(start), static_cast<std::size_t>(end) + 1));
  shape.insert(shape.end(), s.begin() + end + 1, s.end());
  return x.reshape(shape);
}

Tensor squeeze(const Tensor& x) {
  x.check_defined("squeeze");
  const Shape x_strides = x.strides();
  Shape shape, strides;
  for (std::size_t d = 0; d < x.shape().size(); ++d)
    if (x.shape()[d] != 1) {
      shape.push_back(x.shape()[d]);
      strides.push_back(x_strides[d]);
    }
  return relabel_view(x, shape, strides, "squeeze");
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  x.check_defined("squeeze");
  const std::int64_t d = normalize_dim(dim, x.dim(), "squeeze");
  Shape shape = x.shape(), strides = x.strides();
  if (x.dim() > 0 && shape[static_cast<std::size_t>(d)] == 1) {
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
  }
  return relabel_view(x, shape, strides, "squeeze");
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  x.check_defined("unsqueeze");
  const std::int64_t d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  const auto ud = static_cast<std::size_t>(d);
  // PyTorch's choice: the new dim's stride is what a contiguous dim there would have.
  const std::int64_t stride = ud < shape.size() ? shape[ud] * strides[ud] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return relabel_view(x, shape, strides, "unsqueeze");
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  check_list(tensors, "cat");
  const Shape& first = tensors[0].shape();
  if (first.empty()) fail("cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const std::int64_t d = normalize_dim(dim, static_cast<std::int64_t>(first.size()), "cat");
  const auto ud = static_cast<std::size_t>(d);
  Shape shape = first;
  shape[ud] = 0;
  std::vector<std::int64_t> chunks, extents;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Shape& s = tensors[i].shape();
    if (s.size() != first.size())
      fail("cat: tensors must have the same number of dims, got {} at position 0 and {} at position {}",
           shape_string(first), shape_string(s), i);
    for (std::size_t k = 0; k < s.size(); ++k)
      if (k != ud && s[k] != first[k])
        fail("cat: sizes must match except in dim {}, got {} at position 0 and {} at position {}", d,
             shape_string(first), shape_string(s), i);
    shape[ud] += s[ud];
    extents.push_back(s[ud]);
    chunks.push_back(product(s, ud, s.size()));
  }
  if (tensors.size() > max_record_inputs && should_record(tensors)) {
    std::vector<Tensor> groups;
    for (std::size_t i = 0; i < tensors.size(); i += max_record_inputs)
      groups.push_back(cat({tensors.begin() + static_cast<std::ptrdiff_t>(i),
                            tensors.begin() + static_cast<std::ptrdiff_t>(std::min(i + max_record_inputs, tensors.size()))},
                           d));
    return cat(groups, d);
  }
  Tensor out = empty(shape, tensors[0].dtype());
  join_blocks(tensors, chunks, product(first, 0, ud), out);
  if (trace::active()) trace::annotate(out, {{"dim", static_cast<std::int64_t>(d)}});
  return record_if_needed("cat", out, tensors, [&] {
    return [d, extents](const Tensor& g, NeedsGrad needs) {
      std::vector<Tensor> grads(extents.size());
      std::int64_t offset = 0;
      for (std::size_t i = 0; i < extents.size(); ++i) {
        if (needs[i]) grads[i] = slice(g, d, offset, offset + extents[i]);
        offset += extents[i];
      }
      return grads;
    };
  });
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  check_list(tensors, "stack");
  const Shape& first = tensors[0].shape();
  const std::int64_t d = normalize_dim(dim, static_cast<std::int64_t>(first.size()) + 1, "stack");
  const auto ud = static_cast<std::size_t>(d);
  for (std::size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].shape() != first)
      fail("stack: expected all tensors to have the same shape, got {} at position 0 and {} at position {}",
           shape_string(first), shape_string(tensors[i].shape()), i);
  if (tensors.size() > max_record_inputs && should_record(tensors)) {
    std::vector<Tensor> unsqueezed;
    for (const auto& t : tensors) unsqueezed.push_back(unsqueeze(t, d));
    return cat(unsqueezed, d);
  }
  Shape shape = first;
  shape.insert(shape.begin() + d, static_cast<std::int64_t>(tensors.size()));
  Tensor out = empty(shape, tensors[0].dtype());
  join_blocks(tensors, std::vector<std::int64_t>(tensors.size(), product(first, ud, first.size())),
              product(first, 0, ud), out);
  if (trace::active()) trace::annotate(out, {{"dim", static_cast<std::int64_t>(d)}});
  return record_if_needed("stack", out, tensors, [&] {
    return [d, first, count = tensors.size()](const Tensor& g, NeedsGrad needs) {
      std::vector<Tensor> grads(count);
      for (std::size_t i = 0; i < count; ++i) {
        const auto at = static_cast<std::int64_t>(i);
        if (needs[i]) grads[i] = slice(g, d, at, at + 1).reshape(first);
      }
      return grads;
    };
  });
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  x.check_defined("slice");
  if (x.dim() == 0) fail("slice: cannot slice a 0-dim tensor");
  if (step <= 0) fail("slice: step must be positive, got {}", step);
  const auto d = static_cast<std::size_t>(normalize_dim(dim, x.dim(), "slice"));
  const std::int64_t size = x.shape()[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<std::int64_t>(start, 0, size);
  end = std::clamp<std::int64_t>(end, start, size);
  Shape shape = x.shape();
  // Note: written so that no huge step overflows: more than one output element means step < size, so the
  // scaled stride stays within the tensor.
  shape[d] = end == start ? 0 : 1 + (end - start - 1) / step;
  Shape strides = x.strides();
  const std::int64_t offset = x.storage_offset() + (shape[d] > 0 ? start * strides[d] : 0);
  if (shape[d] > 1) strides[d] *= step;
  Tensor out = detail::make_view(x, shape, strides, offset);
  if (trace::active())
    trace::annotate(out, {{"dim", static_cast<std::int64_t>(d)}, {"start", start}, {"end", end}, {"step", step}});
  return record_if_needed("slice", out, {x}, [&] {
    return [xs = x.shape(), d, start, step](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{slice_backward(g, xs, d, start, step)};
    };
  });
}

Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  x.check_defined("narrow");
  if (x.dim() == 0) fail("narrow: cannot narrow a 0-dim tensor");
  const std::int64_t d = normalize_dim(dim, x.dim(), "narrow");
  const std::int64_t size = x.shape()[static_cast<std::size_t>(d)];
  if (length < 0) fail("narrow: length must be non-negative, got {}", length);
  if (start < -size || start > size) fail("narrow: start {} is out of range for dim {} of size {}", start, dim, size);
  if (start < 0) start += size;
  if (length > size - start)
    fail("narrow: start ({}) + length ({}) exceeds dimension size ({})", start, length, size);
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index) {
  x.check_defined("select");
  if (x.dim() == 0) fail("select: cannot select from a 0-dim tensor");
  const std::int64_t d = normalize_dim(dim, x.dim(), "select");
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t size = x.shape()[ud];
  if (index < -size || index >= size)
    fail("select: index {} is out of range for dim {} of size {} (tensor of shape {})", index, dim, size,
         shape_string(x.shape()));
  if (index < 0) index += size;
  Shape shape = x.shape(), strides = x.strides();
  const std::int64_t offset = x.storage_offset() + index * strides[ud];
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = detail::make_view(x, shape, strides, offset);
  if (trace::active()) trace::annotate(out, {{"dim", d}, {"index", index}});
  return record_if_needed("select", out, {x}, [&] {
    return [xs = x.shape(), d, ud, index](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{slice_backward(unsqueeze(g, d), xs, ud, index, 1)};
    };
  });
}

Tensor expand(const Tensor& x, const Shape& sizes) {
  x.check_defined("expand");
  const std::size_t ndim = x.shape().size();
  if (sizes.size() < ndim)
    fail("expand: the number of sizes given ({}) must be at least the number of dims of the tensor ({}), "
         "expanding {} to {}",
         sizes.size(), ndim, shape_string(x.shape()), shape_string(sizes));
  const std::size_t lead = sizes.size() - ndim;
  const Shape x_strides = x.strides();
  Shape shape(sizes.size()), strides(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      if (sizes[i] < 0)
        fail("expand: size -1 (or negative) is not allowed for the new leading dim {} (expanding {} to {})", i,
             shape_string(x.shape()), shape_string(sizes));
      shape[i] = sizes[i];
      strides[i] = 0;
      continue;
    }
    const std::int64_t have = x.shape()[i - lead];
    const std::int64_t want = sizes[i] == -1 ? have : sizes[i];
    if (want < 0) fail("expand: invalid size {} in {}", sizes[i], shape_string(sizes));
    if (have == want) {
      shape[i] = have;
      strides[i] = x_strides[i - lead];
    } else if (have == 1) {
      shape[i] = want;
      strides[i] = 0;
    } else {
      fail("expand: the size of dim {} ({}) must match the new size ({}) unless it is 1, expanding {} to {}", i,
           have, want, shape_string(x.shape()), shape_string(sizes));
    }
  }
  Tensor out = detail::make_view(x, shape, strides, x.storage_offset());
  return record_if_needed("expand", out, {x}, [&] {
    return [xs = x.shape()](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{sum_to(g, xs)}; };
  });
}

}  // namespace tapegrad
