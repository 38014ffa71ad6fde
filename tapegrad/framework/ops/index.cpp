// Indexing: an index list is applied in two passes, as in PyTorch. Integers, Slices, None and Ellipsis make a
// view (select, slice, unsqueeze); then the tensor indices, broadcast together, pick elements of that view
// through index_select over its indexed dims flattened into one, which keeps it differentiable.
#include <tapegrad/framework/ops/index.h>

#include <algorithm>
#include <limits>
#include <string>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/detail/inplace.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

using indexing::TensorIndex;

namespace {

// The result of the basic pass: a view of x, and the view's dims that tensor indices select along.
struct Plan {
  Tensor view;
  std::vector<std::int64_t> dims;  // ascending
  std::vector<Tensor> indices;     // int64, one per dim, not yet broadcast
};

std::int64_t consumed_dims(const std::vector<TensorIndex>& indices, const char* op) {
  std::int64_t consumed = 0, ellipses = 0;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const TensorIndex& i = indices[k];
    switch (i.kind()) {
      case TensorIndex::Kind::Integer:
      case TensorIndex::Kind::Slice: ++consumed; break;
      case TensorIndex::Kind::None: break;
      case TensorIndex::Kind::Ellipsis: ++ellipses; break;
      case TensorIndex::Kind::Tensor:
        if (!i.tensor().defined()) fail("{}: the tensor at position {} of the index list is undefined", op, k);
        if (i.is_mask() && i.tensor().dim() == 0)
          fail("{}: the mask at position {} of the index list is 0-dim; a mask needs at least one dim", op, k);
        if (!i.is_mask() && i.tensor().dtype() != DType::Int64)
          fail("{}: the tensor at position {} of the index list holds {}; indices must be int64 (or a mask)", op,
               k, dtype_name(i.tensor().dtype()));
        consumed += i.is_mask() ? i.tensor().dim() : 1;
        break;
    }
  }
  if (ellipses > 1) fail("{}: an index list can hold at most one Ellipsis, got {}", op, ellipses);
  return consumed;
}

Plan basic_pass(const Tensor& x, const std::vector<TensorIndex>& indices, const char* op) {
  x.check_defined(op);
  const std::int64_t consumed = consumed_dims(indices, op);
  if (consumed > x.dim())
    fail("{}: too many indices for a tensor of shape {}: the index list covers {} dims", op, shape_string(x.shape()),
         consumed);
  Plan plan{x, {}, {}};
  Tensor& v = plan.view;
  std::int64_t d = 0;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const TensorIndex& i = indices[k];
    switch (i.kind()) {
      case TensorIndex::Kind::Integer: {
        const std::int64_t size = v.size(d), at = i.integer();
        if (at < -size || at >= size)
          fail("{}: index {} is out of bounds for dim {} with size {} (position {} of the index list, tensor of "
               "shape {})",
               op, at, d, size, k, shape_string(x.shape()));
        v = select(v, d, at);
        break;
      }
      case TensorIndex::Kind::Slice: {
        const auto& s = i.slice();
        const std::int64_t step = s.step.value_or(1);
        if (step <= 0) fail("{}: slice step must be positive, got {} (position {} of the index list)", op, step, k);
        v = slice(v, d, s.start.value_or(0), s.stop.value_or(std::numeric_limits<std::int64_t>::max()), step);
        ++d;
        break;
      }
      case TensorIndex::Kind::None: v = unsqueeze(v, d++); break;
      case TensorIndex::Kind::Ellipsis: d += x.dim() - consumed; break;
      case TensorIndex::Kind::Tensor: {
        const Tensor& t = i.tensor();
        if (!i.is_mask()) {
          plan.dims.push_back(d++);
          plan.indices.push_back(t);
          break;
        }
        const Shape covered(v.shape().begin() + d, v.shape().begin() + d + t.dim());
        if (covered != t.shape())
          fail("{}: the shape of the mask {} at position {} of the index list does not match the shape {} of the "
               "indexed tensor's dims {} to {}",
               op, shape_string(t.shape()), k, shape_string(covered), d, d + t.dim() - 1);
        const Tensor m = detail::contiguous_values(t);
        detail::dispatch_all(m.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* p = m.data<T>();
          if (is_floating(m.dtype()))
            for (std::int64_t e = 0; e < m.numel(); ++e)
              if (p[e] != T(0) && p[e] != T(1))
                fail("{}: a {} tensor in an index list is a mask and must hold only 0 and 1, got {} (position {}); "
                     "use an int64 tensor for indices",
                     op, dtype_name(m.dtype()), static_cast<double>(p[e]), k);
        });
        const Tensor where = nonzero(m);
        for (std::int64_t j = 0; j < t.dim(); ++j) {
          plan.dims.push_back(d++);
          plan.indices.push_back(where.select(1, j));
        }
        break;
      }
    }
  }
  return plan;
}

// Where the advanced pass puts its broadcast dims: at the first indexed dim when the indexed dims are
// adjacent, else in front (PyTorch's rule).
std::int64_t advanced_position(const std::vector<std::int64_t>& dims) {
  for (std::size_t j = 1; j < dims.size(); ++j)
    if (dims[j] != dims[j - 1] + 1) return 0;
  return dims.front();
}

// The layout shared by gathering and writing: the view with its indexed dims moved to the front, the
// broadcast index shape, and the flat position of each index tuple among the indexed dims.
struct Advanced {
  Tensor moved;                    // view.permute(indexed dims first)
  Shape index_shape;               // the indices broadcast together
  Shape indexed;                   // extents of the indexed dims
  std::vector<std::int64_t> flat;  // per index tuple: row-major position within `indexed`
  std::int64_t position = 0;       // advanced_position
};

Advanced advanced_pass(const Plan& plan, const char* op) {
  Advanced a;
  const Tensor& v = plan.view;
  std::vector<std::int64_t> perm = plan.dims;
  for (std::int64_t d = 0; d < v.dim(); ++d)
    if (std::find(plan.dims.begin(), plan.dims.end(), d) == plan.dims.end()) perm.push_back(d);
  a.moved = permute(v, perm);
  for (const Tensor& t : plan.indices) a.index_shape = broadcast_shapes(a.index_shape, t.shape(), op);
  const std::int64_t n = shape_numel(a.index_shape);
  a.flat.assign(static_cast<std::size_t>(n), 0);
  for (std::size_t j = 0; j < plan.dims.size(); ++j) {
    const std::int64_t size = v.size(plan.dims[j]);
    a.indexed.push_back(size);
    const Tensor idx = detail::contiguous_values(expand(plan.indices[j], a.index_shape));
    const std::int64_t* p = idx.data<std::int64_t>();
    for (std::int64_t e = 0; e < n; ++e) {
      std::int64_t at = p[e];
      if (at < -size || at >= size)
        fail("{}: index {} is out of bounds for dim {} with size {} (an index tensor)", op, at, plan.dims[j], size);
      if (at < 0) at += size;
      a.flat[static_cast<std::size_t>(e)] = a.flat[static_cast<std::size_t>(e)] * size + at;
    }
  }
  a.position = advanced_position(plan.dims);
  return a;
}

// Moves dims [from, from+count) of an `ndim`-dim tensor to start at `to`, keeping the others in order.
std::vector<std::int64_t> move_block(std::int64_t ndim, std::int64_t from, std::int64_t count, std::int64_t to) {
  std::vector<std::int64_t> others, perm;
  for (std::int64_t d = 0; d < ndim; ++d)
    if (d < from || d >= from + count) others.push_back(d);
  for (std::int64_t d = 0; d < to; ++d) perm.push_back(others[static_cast<std::size_t>(d)]);
  for (std::int64_t d = 0; d < count; ++d) perm.push_back(from + d);
  for (std::size_t d = static_cast<std::size_t>(to); d < others.size(); ++d) perm.push_back(others[d]);
  return perm;
}

Tensor gather_advanced(const Plan& plan, const char* op) {
  const Advanced a = advanced_pass(plan, op);
  const auto k = static_cast<std::int64_t>(plan.dims.size());
  Shape rest(a.moved.shape().begin() + k, a.moved.shape().end());
  Shape rows = rest;
  rows.insert(rows.begin(), shape_numel(a.indexed));
  const Tensor flat = a.moved.reshape(rows);
  const Tensor picked = index_select(flat, 0, from_vector(a.flat, {static_cast<std::int64_t>(a.flat.size())}));
  Shape out_shape = a.index_shape;
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  Tensor out = picked.reshape(out_shape);
  if (a.position == 0) return out;
  const auto nb = static_cast<std::int64_t>(a.index_shape.size());
  return permute(out, move_block(out.dim(), 0, nb, a.position)).contiguous();
}

// True when `from` broadcasts to exactly `to` (NumPy rules), without throwing.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const std::int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != 1 && f != t) return false;
  }
  return true;
}

void bump_version(const Tensor& t) {
  if (!t.impl()->is_inference) t.impl()->storage->bump_version();
}

void check_index_put(const Tensor& x, const Tensor& values, const char* op) {
  x.check_defined(op);
  values.check_defined(op);
  if (values.dtype() != x.dtype())
    fail("{}: values are {} but the indexed tensor is {}; convert them with to()", op, dtype_name(values.dtype()),
         dtype_name(x.dtype()));
}

void put_in_place(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, const char* op) {
  check_index_put(x, values, op);
  NoGradGuard no_grad;
  const Plan plan = basic_pass(x, indices, op);
  if (plan.dims.empty()) {
    Tensor target = plan.view;
    if (!broadcasts_to(values.shape(), target.shape()))
      fail("{}: values of shape {} cannot be broadcast to the indexed shape {}", op, shape_string(values.shape()),
           shape_string(target.shape()));
    target.copy_(values);
    return;
  }
  const Advanced a = advanced_pass(plan, op);
  const auto k = static_cast<std::int64_t>(plan.dims.size());
  const auto nb = static_cast<std::int64_t>(a.index_shape.size());
  const Shape moved_strides = a.moved.strides();
  const Shape rest(a.moved.shape().begin() + k, a.moved.shape().end());
  const Shape rest_strides(moved_strides.begin() + k, moved_strides.end());
  // The indexed shape as index() would return it, then values in [index dims..., rest...] order.
  Shape front = a.index_shape;
  front.insert(front.end(), rest.begin(), rest.end());
  Shape result = front;
  if (a.position > 0) {
    const auto perm = move_block(static_cast<std::int64_t>(front.size()), 0, nb, a.position);
    for (std::size_t d = 0; d < perm.size(); ++d) result[d] = front[static_cast<std::size_t>(perm[d])];
  }
  if (!broadcasts_to(values.shape(), result))
    fail("{}: values of shape {} cannot be broadcast to the indexed shape {}", op, shape_string(values.shape()),
         shape_string(result));
  Tensor ordered = expand(values, result);
  if (a.position > 0)
    ordered = permute(ordered, move_block(static_cast<std::int64_t>(result.size()), a.position, nb, 0));
  // Note: values in x's own storage (x.index_put_({perm}, x)) would be read after the loop overwrote them (that
  // gave all x[0]); they are copied first. PyTorch 1.13 refuses such an overlap.
  Tensor source = detail::contiguous_values(ordered);
  if (source.impl()->storage == x.impl()->storage) source = source.clone();
  // Storage offset of each indexed position's first element.
  const Shape indexed_strides(moved_strides.begin(), moved_strides.begin() + k);
  const Shape flat_strides = contiguous_strides(a.indexed);
  const std::int64_t rest_numel = shape_numel(rest);
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* storage = static_cast<T*>(x.impl()->storage->data());
    const T* from = source.data<T>();
    for (std::size_t e = 0; e < a.flat.size(); ++e) {
      std::int64_t offset = a.moved.storage_offset(), position = a.flat[e];
      for (std::size_t j = 0; j < indexed_strides.size(); ++j) {
        offset += position / flat_strides[j] * indexed_strides[j];
        position %= flat_strides[j];
      }
      const T* row = from + static_cast<std::int64_t>(e) * rest_numel;
      detail::for_each_run(rest, rest_strides, offset,
                           [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                             for (std::int64_t q = 0; q < inner; ++q) storage[s + q * step] = row[o + q];
                           });
    }
  });
  bump_version(x);
}

// The index list with private copies of its tensors, for a backward: it reads the indices again, and the
// caller's index tensors may be written in place before it runs (a reused index buffer), which silently moved
// the gradients; PyTorch refuses that backward, a copy keeps the indices the op used.
std::vector<TensorIndex> frozen(const std::vector<TensorIndex>& indices) {
  std::vector<TensorIndex> out;
  out.reserve(indices.size());
  for (const TensorIndex& i : indices) {
    if (i.kind() != TensorIndex::Kind::Tensor || !i.tensor().defined()) {
      out.push_back(i);
      continue;
    }
    const Tensor copy = i.tensor().detach().clone();
    out.push_back(i.is_mask() ? TensorIndex(indexing::Mask(copy)) : TensorIndex(copy));
  }
  return out;
}

}  // namespace

Tensor nonzero(const Tensor& mask) {
  mask.check_defined("nonzero");
  const Tensor m = detail::contiguous_values(mask);
  const Shape strides = contiguous_strides(m.shape());
  std::vector<std::int64_t> coords;
  std::int64_t count = 0;
  detail::dispatch_all(m.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = m.data<T>();
    for (std::int64_t e = 0; e < m.numel(); ++e) {
      if (p[e] == T(0)) continue;
      ++count;
      std::int64_t rest = e;
      for (std::size_t d = 0; d < strides.size(); ++d) {
        coords.push_back(rest / strides[d]);
        rest %= strides[d];
      }
    }
  });
  return from_vector(coords, {count, m.dim()});
}

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  const Plan plan = basic_pass(x, indices, "index");
  if (plan.dims.empty()) return plan.view;
  return gather_advanced(plan, "index");
}

Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values) {
  check_index_put(x.detach(), values.detach(), "index_put");
  Tensor out = x.detach().clone();
  put_in_place(out, indices, values.detach(), "index_put");
  return record_if_needed("index_put", out, {x, values}, [&] {
    return [indices = frozen(indices), vs = values.shape()](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? index_put(g, indices, scalar_tensor(0.0, g.dtype())) : Tensor(),
                                 needs[1] ? sum_to(index(g, indices), vs) : Tensor()};
    };
  });
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const { return tapegrad::index(*this, indices); }
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return tapegrad::index(*this, indices); }

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values) {
  return index_put_(std::vector<TensorIndex>(indices), values);
}
// Recorded as the other in-place ops (ops/inplace.cpp), with index_put's backward.
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) {
  check_defined("index_put_");
  values.check_defined("index_put_");
  detail::InPlaceRecord record(*this, "index_put_", {values});
  put_in_place(*this, indices, values.detach(), "index_put_");
  record.record([indices = record.active() ? frozen(indices) : indices, vs = values.shape()](const Tensor& g,
                                                                                          NeedsGrad needs) {
    return std::vector<Tensor>{needs[0] ? tapegrad::index_put(g, indices, scalar_tensor(0.0, g.dtype())) : Tensor(),
                               needs[1] ? sum_to(tapegrad::index(g, indices), vs) : Tensor()};
  });
  return *this;
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, double value) {
  check_defined("index_put_");
  return index_put_(std::vector<TensorIndex>(indices), scalar_tensor(value, dtype()));
}

}  // namespace tapegrad
