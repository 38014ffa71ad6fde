// Layout ops: transpose, permute, flatten, squeeze, unsqueeze, cat, stack, slice, narrow.
// Each forward copies (or relabels) and, right below, says how the gradient flows back.
#include <tapegrad/framework/ops/shape_ops.h>

#include <algorithm>
#include <cstring>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>

namespace tapegrad {

namespace {

// Calls run(contiguous_offset, strided_offset, inner, inner_stride) once per innermost run of `shape`,
// where the strided side starts at `base` and moves by `strides` (in elements) along each dim.
template <class F>
void for_each_run(const Shape& shape, const Shape& strides, std::int64_t base, F run) {
  const std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  const std::size_t ndim = shape.size();
  if (ndim == 0) {
    run(0, base, 1, 1);
    return;
  }
  const std::int64_t inner = shape[ndim - 1], inner_stride = strides[ndim - 1];
  std::vector<std::int64_t> index(ndim, 0);
  std::int64_t offset = base;
  for (std::int64_t start = 0; start < n; start += inner) {
    run(start, offset, inner, inner_stride);
    for (std::size_t d = ndim - 1; d-- > 0;) {
      offset += strides[d];
      if (++index[d] < shape[d]) break;
      offset -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

// out (contiguous, `shape`) <- in read at `base` + strides.
Tensor strided_gather(const Tensor& in, const Shape& shape, const Shape& strides, std::int64_t base) {
  Tensor out = empty(shape, in.dtype());
  detail::dispatch_all(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    for_each_run(shape, strides, base, [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
      if (step == 1)
        std::copy_n(src + s, inner, dst + o);
      else
        for (std::int64_t k = 0; k < inner; ++k) dst[o + k] = src[s + k * step];
    });
  });
  return out;
}

std::int64_t product(const Shape& shape, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= shape[i];
  return p;
}

Tensor permute_as(const Tensor& x, const std::vector<std::int64_t>& dims, const char* op) {
  const Shape strides = contiguous_strides(x.shape());
  Shape shape(dims.size()), read_strides(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    shape[i] = x.shape()[static_cast<std::size_t>(dims[i])];
    read_strides[i] = strides[static_cast<std::size_t>(dims[i])];
  }
  Tensor out = strided_gather(x, shape, read_strides, 0);
  return record_if_needed(op, out, {x}, [&] {
    std::vector<std::int64_t> inverse(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) inverse[static_cast<std::size_t>(dims[i])] = static_cast<std::int64_t>(i);
    return [inverse](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{permute(g, inverse)}; };
  });
}

// The gradient of slice: zeros of the input's shape with g written into the sliced positions.
// Note: an op of its own (not a raw kernel) so that its backward, a slice, keeps double backward working.
Tensor slice_backward(const Tensor& g, const Shape& input_shape, std::size_t dim, std::int64_t start,
                      std::int64_t step) {
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
    const auto* src = static_cast<const unsigned char*>(tensors[i].raw_data());
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
  if (x.dim() == 0) return x.clone();
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(i);
  std::swap(dims[static_cast<std::size_t>(a)], dims[static_cast<std::size_t>(b)]);
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
  Shape shape;
  for (auto e : x.shape())
    if (e != 1) shape.push_back(e);
  return x.reshape(shape);
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  x.check_defined("squeeze");
  const std::int64_t d = normalize_dim(dim, x.dim(), "squeeze");
  Shape shape = x.shape();
  if (x.dim() > 0 && shape[static_cast<std::size_t>(d)] == 1) shape.erase(shape.begin() + d);
  return x.reshape(shape);
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  x.check_defined("unsqueeze");
  const std::int64_t d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return x.reshape(shape);
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
  Shape strides = contiguous_strides(x.shape());
  const std::int64_t base = start * strides[d];
  strides[d] = shape[d] > 1 ? strides[d] * step : 0;
  Tensor out = strided_gather(x, shape, strides, base);
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

}  // namespace tapegrad
