// Sums and means. sum_to is the workhorse: every broadcasting op's backward reduces through it.
#include "framework/ops/reduction.h"

#include <algorithm>

#include "framework/autograd/function.h"
#include "framework/detail/broadcast.h"
#include "framework/detail/dispatch.h"
#include "framework/ops/elementwise.h"

namespace tapegrad {

namespace {

// The shape with `dims` set to 1, and the validated, sorted, unique dims.
Shape kept_shape(const Tensor& x, const std::vector<std::int64_t>& dims, const char* op,
                 std::vector<std::int64_t>* normalized) {
  Shape keep = x.shape();
  std::vector<std::int64_t> seen;
  for (auto d : dims) {
    const std::int64_t nd = normalize_dim(d, x.dim(), op);
    if (std::find(seen.begin(), seen.end(), nd) != seen.end()) fail("{}: dim {} given twice", op, d);
    seen.push_back(nd);
    if (x.dim() > 0) keep[nd] = 1;
  }
  std::sort(seen.begin(), seen.end());
  if (normalized) *normalized = seen;
  return keep;
}

Shape drop_dims(const Shape& shape, const std::vector<std::int64_t>& sorted_dims) {
  Shape out;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (!std::binary_search(sorted_dims.begin(), sorted_dims.end(), static_cast<std::int64_t>(i)))
      out.push_back(shape[i]);
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& x, const Shape& shape) {
  x.check_defined("sum_to");
  if (x.shape() == shape) return x;
  if (broadcast_shapes(shape, x.shape(), "sum_to") != x.shape())
    fail("sum_to: shape {} cannot be reduced to {}", shape_string(x.shape()), shape_string(shape));
  Tensor out = zeros(shape, TensorOptions{}.with_dtype(x.dtype()));
  detail::dispatch_floating(x.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const Shape& xs = x.shape();
    const std::size_t ndim = xs.size();
    const std::int64_t n = x.numel();
    if (n == 0) return;
    if (out.numel() == 1) {
      double total = 0;  // Note: accumulate a full reduction in double; float32 sums of 1e5 terms drift
      for (std::int64_t i = 0; i < n; ++i) total += in[i];
      o[0] = static_cast<T>(total);
      return;
    }
    const Shape so = detail::broadcast_strides(shape, xs);
    const std::int64_t inner = xs[ndim - 1], step = so[ndim - 1];
    std::vector<std::int64_t> index(ndim, 0);
    std::int64_t offset = 0;
    for (std::int64_t base = 0; base < n; base += inner) {
      const T* p = in + base;
      T* q = o + offset;
      if (step == 0) {
        T acc = 0;
        for (std::int64_t k = 0; k < inner; ++k) acc += p[k];
        q[0] += acc;
      } else {
        for (std::int64_t k = 0; k < inner; ++k) q[k] += p[k];
      }
      for (std::size_t d = ndim - 1; d-- > 0;) {
        offset += so[d];
        if (++index[d] < xs[d]) break;
        offset -= so[d] * xs[d];
        index[d] = 0;
      }
    }
  });
  return record_if_needed("sum_to", out, {x}, [xs = x.shape()] {
    return [xs](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{broadcast_to(g, xs)}; };
  });
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  x.check_defined("broadcast_to");
  if (x.shape() == shape) return x;
  if (broadcast_shapes(x.shape(), shape, "broadcast_to") != shape)
    fail("broadcast_to: shape {} cannot be broadcast to {}", shape_string(x.shape()), shape_string(shape));
  Tensor out = empty(shape, x.dtype());
  detail::dispatch_floating(x.dtype(), "broadcast_to", [&](auto tag) {
    using T = decltype(tag);
    detail::broadcast_binary(x.data<T>(), x.shape(), x.data<T>(), x.shape(), out.data<T>(), shape,
                             [](T v, T) { return v; });
  });
  return record_if_needed("broadcast_to", out, {x}, [xs = x.shape()] {
    return [xs](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{sum_to(g, xs)}; };
  });
}

Tensor sum(const Tensor& x) {
  x.check_defined("sum");
  return sum_to(x, Shape{});
}

Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  x.check_defined("sum");
  std::vector<std::int64_t> normalized;
  const Shape keep = kept_shape(x, dims, "sum", &normalized);
  Tensor reduced = sum_to(x, keep);
  if (reduced.is_same(x)) reduced = x.reshape(keep);  // nothing to sum: still a new tensor
  return keepdim ? reduced : reduced.reshape(drop_dims(x.shape(), normalized));
}

Tensor mean(const Tensor& x) {
  x.check_defined("mean");
  if (x.numel() == 0) fail("mean: empty tensor of shape {}", shape_string(x.shape()));
  return div(sum(x), static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  x.check_defined("mean");
  std::vector<std::int64_t> normalized;
  const Shape keep = kept_shape(x, dims, "mean", &normalized);
  const std::int64_t count = keep.empty() ? 1 : x.numel() / std::max<std::int64_t>(shape_numel(keep), 1);
  if (count == 0) fail("mean: no elements to average over in shape {}", shape_string(x.shape()));
  return div(sum(x, dims, keepdim), static_cast<double>(count));
}

}  // namespace tapegrad
