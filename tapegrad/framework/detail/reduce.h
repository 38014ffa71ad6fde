#pragma once
// Internal: how a reduction over some dims maps input elements to output elements.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/shape.h>

namespace tapegrad::detail {

/// A validated reduction: the shape with reduced dims kept as 1, the shape without them, and the
/// number of input elements folded into each output element.
struct ReducePlan {
  Shape keep;
  Shape out;
  std::vector<std::int64_t> dims;  // sorted, unique, non-negative
  std::int64_t count = 1;
};

/// Validates `dims` of `shape` (negative allowed, no repeats) for the op named `op`.
inline ReducePlan plan_reduction(const Shape& shape, const std::vector<std::int64_t>& dims, const char* op) {
  ReducePlan plan;
  plan.keep = shape;
  const auto ndim = static_cast<std::int64_t>(shape.size());
  for (auto d : dims) {
    const std::int64_t nd = normalize_dim(d, ndim, op);
    if (std::find(plan.dims.begin(), plan.dims.end(), nd) != plan.dims.end()) fail("{}: dim {} given twice", op, d);
    plan.dims.push_back(nd);
  }
  std::sort(plan.dims.begin(), plan.dims.end());
  for (auto d : plan.dims) {
    if (ndim == 0) continue;
    plan.count *= shape[static_cast<std::size_t>(d)];
    plan.keep[static_cast<std::size_t>(d)] = 1;
  }
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (!std::binary_search(plan.dims.begin(), plan.dims.end(), static_cast<std::int64_t>(i)))
      plan.out.push_back(shape[i]);
  return plan;
}

/// Every dim of a shape of `ndim` dims: a full reduction.
inline std::vector<std::int64_t> all_dims(std::int64_t ndim) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d) dims.push_back(d);
  return dims;
}

/// Calls f(out_offset, value) for every element of `in` (of shape `shape`) in row-major order, where
/// out_offset indexes the reduced tensor of shape `keep`. Row-major order makes "first" well defined.
template <class T, class F>
void for_each_reduced(const T* in, const Shape& shape, const Shape& keep, F f) {
  const std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  if (shape.empty()) {
    f(std::int64_t{0}, in[0]);
    return;
  }
  const std::size_t ndim = shape.size();
  const Shape so = broadcast_strides(keep, shape);
  const std::int64_t inner = shape[ndim - 1], step = so[ndim - 1];
  std::vector<std::int64_t> index(ndim, 0);
  std::int64_t offset = 0;
  for (std::int64_t base = 0; base < n; base += inner) {
    for (std::int64_t k = 0; k < inner; ++k) f(offset + k * step, in[base + k]);
    for (std::size_t d = ndim - 1; d-- > 0;) {
      offset += so[d];
      if (++index[d] < shape[d]) break;
      offset -= so[d] * shape[d];
      index[d] = 0;
    }
  }
}

/// A single dim `dim` of `shape` seen as [outer, n, inner] (row-major).
struct DimSplit {
  std::int64_t outer = 1, n = 1, inner = 1;
};

inline DimSplit split_at(const Shape& shape, std::int64_t dim) {
  DimSplit s;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    const std::int64_t e = shape[static_cast<std::size_t>(d)];
    if (d < dim) s.outer *= e;
    else if (d == dim) s.n = e;
    else s.inner *= e;
  }
  return s;
}

}  // namespace tapegrad::detail
