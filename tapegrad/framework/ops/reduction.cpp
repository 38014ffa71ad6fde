// Sums and means. sum_to is the workhorse: every broadcasting op's backward reduces through it.
#include <tapegrad/framework/ops/reduction.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/reduce.h>
#include <tapegrad/framework/kernels/column_sums.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/detail/integer_sum.h>
#include <tapegrad/framework/ops/elementwise.h>

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

Tensor sum_to(const Tensor& x_in, const Shape& shape) {
  const Tensor x = x_in.contiguous();
  x.check_defined("sum_to");
  if (x.shape() == shape) return x;
  if (broadcast_shapes(shape, x.shape(), "sum_to") != x.shape())
    fail("sum_to: shape {} cannot be reduced to {}", shape_string(x.shape()), shape_string(shape));
  if (x.dtype() == DType::Int64) {
    // the dims broadcasting added (leading ones, and extents 1 in `shape` against more in x), summed exactly
    const std::size_t lead = x.shape().size() - shape.size();
    std::vector<std::int64_t> dims;
    for (std::size_t d = 0; d < x.shape().size(); ++d)
      if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(static_cast<std::int64_t>(d));
    return detail::integer_sum(x, dims, /*keepdim=*/true).reshape(shape);
  }
  Tensor out = zeros(shape, TensorOptions{}.with_dtype(x.dtype()));
  detail::dispatch_floating(x.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const Shape& xs = x.shape();
    const std::size_t ndim = xs.size();
    const std::int64_t n = x.numel();
    if (n == 0) return;
    // Note: every output element accumulates in double and is rounded once at the end. A float32 running sum
    // loses the small terms once the total is large (2^20 terms of 0.1f drift by ~1%); PyTorch's cascade sum
    // keeps float32 sums to a few ulps at any length, and so does this.
    // When the kept dims are a trailing block of x's (a bias over rows, a whole-tensor sum), x is a [rows, cols]
    // matrix and the result is its column sums.
    const std::size_t lead = ndim - shape.size();
    std::size_t first = lead;
    while (first < ndim && shape[first - lead] == 1) ++first;
    bool trailing = true;
    for (std::size_t d = first; d < ndim; ++d) trailing = trailing && shape[d - lead] == xs[d];
    if (trailing) {
      kernels::column_sums(n / out.numel(), out.numel(), in, o);
      return;
    }
    std::vector<double> widened;  // float32's accumulators; float64 accumulates in the (zeroed) output
    double* totals = nullptr;
    if constexpr (std::is_same_v<T, double>) {
      totals = o;
    } else {
      widened.assign(static_cast<std::size_t>(out.numel()), 0.0);
      totals = widened.data();
    }
    const Shape so = detail::broadcast_strides(shape, xs);
    const std::int64_t inner = xs[ndim - 1], step = so[ndim - 1];
    std::vector<std::int64_t> index(ndim, 0);
    std::int64_t offset = 0;
    for (std::int64_t base = 0; base < n; base += inner) {
      const T* p = in + base;
      double* q = totals + offset;
      if (step == 0) {
        double acc = 0;
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
    for (std::size_t i = 0; i < widened.size(); ++i) o[i] = static_cast<T>(widened[i]);
  });
  return record_if_needed("sum_to", out, {x}, [xs = x.shape()] {
    return [xs](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{broadcast_to(g, xs)}; };
  });
}

Tensor broadcast_to(const Tensor& x_in, const Shape& shape) {
  const Tensor x = x_in.contiguous();
  x.check_defined("broadcast_to");
  if (x.shape() == shape) return x;
  if (broadcast_shapes(x.shape(), shape, "broadcast_to") != shape)
    fail("broadcast_to: shape {} cannot be broadcast to {}", shape_string(x.shape()), shape_string(shape));
  Tensor out = empty(shape, x.dtype());
  // Note: only copies elements, so bfloat16 too (as expand().contiguous()).
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
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
  if (x.dtype() == DType::Int64) return detail::integer_sum(x, detail::all_dims(x.dim()), false);
  return sum_to(x, Shape{});
}

Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  x.check_defined("sum");
  if (x.dtype() == DType::Int64) return detail::integer_sum(x, dims, keepdim);
  std::vector<std::int64_t> normalized;
  const Shape keep = kept_shape(x, dims, "sum", &normalized);
  Tensor reduced = sum_to(x, keep);
  if (reduced.is_same(x)) reduced = x.reshape(keep);  // nothing to sum: still a new tensor
  return keepdim ? reduced : reduced.reshape(drop_dims(x.shape(), normalized));
}

namespace {
// PyTorch's own words (a porter may search for them), then what to do about it here.
void check_mean_dtype(const Tensor& x) {
  if (!is_floating(x.dtype()))
    fail("mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
         "Got: Long (an int64 tensor of shape {}; convert it first, e.g. x.to(DType::Float32))",
         shape_string(x.shape()));
}
}  // namespace

Tensor mean(const Tensor& x) {
  x.check_defined("mean");
  check_mean_dtype(x);
  if (x.numel() == 0) fail("mean: empty tensor of shape {}", shape_string(x.shape()));
  return div(sum(x), static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  x.check_defined("mean");
  check_mean_dtype(x);
  std::vector<std::int64_t> normalized;
  const Shape keep = kept_shape(x, dims, "mean", &normalized);
  const std::int64_t count = keep.empty() ? 1 : x.numel() / std::max<std::int64_t>(shape_numel(keep), 1);
  if (count == 0) fail("mean: no elements to average over in shape {}", shape_string(x.shape()));
  return div(sum(x, dims, keepdim), static_cast<double>(count));
}

}  // namespace tapegrad

// ---- max, min, var: one fused forward kernel each, backward from recorded ops ----
namespace tapegrad {

namespace {

Tensor take_along(const Tensor& x, const Tensor& indices, std::int64_t dim);
Tensor put_along(const Tensor& g, const Tensor& indices, std::int64_t dim, const Shape& shape);

// out[o, 0, i] = x[o, indices[o, i], i] along `dim`; indices has x's shape with dim set to 1.
// Its backward is put_along, whose backward is take_along again: both orders stay differentiable.
Tensor take_along(const Tensor& x_in, const Tensor& indices_in, std::int64_t dim) {
  const Tensor x = x_in.contiguous(), indices = indices_in.contiguous();
  const detail::DimSplit s = detail::split_at(x.shape(), dim);
  Tensor out = empty(indices.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), "take_along", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    T* o = out.data<T>();
    for (std::int64_t a = 0; a < s.outer; ++a)
      for (std::int64_t i = 0; i < s.inner; ++i)
        o[a * s.inner + i] = in[(a * s.n + idx[a * s.inner + i]) * s.inner + i];
  });
  return record_if_needed("take_along", out, {x}, [&] {
    return [si = SavedTensor(indices, "take_along"), dim, xs = x.shape()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{put_along(g, si.get(), dim, xs)};
    };
  });
}

// Zeros of `shape` with g placed at `indices` along `dim`.
Tensor put_along(const Tensor& g_in, const Tensor& indices_in, std::int64_t dim, const Shape& shape) {
  const Tensor g = g_in.contiguous(), indices = indices_in.contiguous();
  const detail::DimSplit s = detail::split_at(shape, dim);
  Tensor out = zeros(shape, TensorOptions{}.with_dtype(g.dtype()));
  detail::dispatch_floating(g.dtype(), "put_along", [&](auto tag) {
    using T = decltype(tag);
    const T* in = g.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    T* o = out.data<T>();
    for (std::int64_t a = 0; a < s.outer; ++a)
      for (std::int64_t i = 0; i < s.inner; ++i)
        o[(a * s.n + idx[a * s.inner + i]) * s.inner + i] += in[a * s.inner + i];
  });
  return record_if_needed("put_along", out, {g}, [&] {
    return [si = SavedTensor(indices, "put_along"), dim](const Tensor& gg, NeedsGrad) {
      return std::vector<Tensor>{take_along(gg, si.get(), dim)};
    };
  });
}

// True when v should replace best: strictly better, or the first NaN (NaN propagates, as PyTorch).
template <bool IsMax, class T>
bool replaces(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(best)) return false;
    if (std::isnan(v)) return true;
  }
  return IsMax ? v > best : v < best;
}

template <bool IsMax>
ValuesIndices extremum_along(const Tensor& x_in, std::int64_t dim, bool keepdim, const char* op) {
  const Tensor x = x_in.contiguous();
  x.check_defined(op);
  const std::int64_t nd = normalize_dim(dim, std::max<std::int64_t>(x.dim(), 1), op);
  Shape keep = x.shape(), out_shape = x.shape();
  if (x.dim() > 0) {
    keep[static_cast<std::size_t>(nd)] = 1;
    out_shape.erase(out_shape.begin() + nd);
  }
  const detail::DimSplit s = detail::split_at(x.shape(), nd);
  if (s.n == 0) fail("{}: cannot reduce over dim {} of size 0 in shape {}", op, dim, shape_string(x.shape()));
  const Shape& result_shape = keepdim ? keep : out_shape;
  if (x.dtype() == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", op);
  Tensor values = empty(result_shape, x.dtype());
  Tensor indices = empty(result_shape, DType::Int64);
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* best = values.data<T>();
    std::int64_t* where = indices.data<std::int64_t>();
    // k outermost inside each block keeps the inner dim contiguous in memory
    for (std::int64_t a = 0; a < s.outer; ++a) {
      const T* block = in + a * s.n * s.inner;
      T* b = best + a * s.inner;
      std::int64_t* w = where + a * s.inner;
      for (std::int64_t i = 0; i < s.inner; ++i) {
        b[i] = block[i];
        w[i] = 0;
      }
      for (std::int64_t k = 1; k < s.n; ++k)
        for (std::int64_t i = 0; i < s.inner; ++i)
          if (replaces<IsMax>(block[k * s.inner + i], b[i])) {
            b[i] = block[k * s.inner + i];
            w[i] = k;
          }
    }
  });
  values = record_if_needed(op, values, {x}, [&] {
    return [si = SavedTensor(indices.reshape(keep), op), nd, keep, xs = x.shape()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{put_along(g.reshape(keep), si.get(), nd, xs)};
    };
  });
  return ValuesIndices{values, indices};
}

template <bool IsMax>
Tensor extremum_over(const Tensor& x_in, const std::vector<std::int64_t>& dims, bool keepdim, const char* op) {
  const Tensor x = x_in.contiguous();
  x.check_defined(op);
  const detail::ReducePlan plan = detail::plan_reduction(x.shape(), dims, op);
  if (plan.count == 0 || (x.numel() == 0 && shape_numel(plan.keep) != 0))
    fail("{}: cannot reduce an empty dim of shape {}", op, shape_string(x.shape()));
  if (x.dtype() == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", op);
  Tensor out = empty(keepdim ? plan.keep : plan.out, x.dtype());
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    // the identity of max/min: -inf/+inf for floats, the extreme representable values for int64
    using Limits = std::numeric_limits<T>;
    const T start = Limits::has_infinity ? (IsMax ? -Limits::infinity() : Limits::infinity())
                                         : (IsMax ? Limits::lowest() : Limits::max());
    std::fill(o, o + out.numel(), start);
    detail::for_each_reduced(x.data<T>(), x.shape(), plan.keep, [o](std::int64_t j, T v) {
      if (replaces<IsMax>(v, o[j])) o[j] = v;
    });
  });
  return record_if_needed(op, out, {x}, [&] {
    return [sx = SavedTensor(x, op), values = SavedTensor(out.detach().reshape(plan.keep), op), plan](
               const Tensor& g, NeedsGrad) {
      // Note: the tie mask and its count are constants, so this is differentiable in g (double backward).
      Tensor mask = eq(sx.get(), values.get());
      Tensor share = div(mask, sum(mask, plan.dims, /*keepdim=*/true));
      return std::vector<Tensor>{mul(g.reshape(plan.keep), share)};
    };
  });
}

}  // namespace

Tensor max(const Tensor& x) {
  x.check_defined("max");
  return extremum_over<true>(x, detail::all_dims(x.dim()), false, "max");
}
Tensor min(const Tensor& x) {
  x.check_defined("min");
  return extremum_over<false>(x, detail::all_dims(x.dim()), false, "min");
}
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim) { return extremum_along<true>(x, dim, keepdim, "max"); }
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim) {
  return extremum_along<false>(x, dim, keepdim, "min");
}
Tensor amax(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extremum_over<true>(x, dims, keepdim, "amax");
}
Tensor amin(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extremum_over<false>(x, dims, keepdim, "amin");
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return extremum_along<true>(x, dim, keepdim, "argmax").indices;
}
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return extremum_along<false>(x, dim, keepdim, "argmin").indices;
}
Tensor argmax(const Tensor& x) {
  x.check_defined("argmax");
  NoGradGuard no_grad;
  if (x.numel() == 0) fail("argmax: cannot take the argmax of an empty tensor of shape {}", shape_string(x.shape()));
  return extremum_along<true>(x.reshape({-1}), 0, false, "argmax").indices;
}
Tensor argmin(const Tensor& x) {
  x.check_defined("argmin");
  NoGradGuard no_grad;
  if (x.numel() == 0) fail("argmin: cannot take the argmin of an empty tensor of shape {}", shape_string(x.shape()));
  return extremum_along<false>(x.reshape({-1}), 0, false, "argmin").indices;
}

Tensor var(const Tensor& x) {
  x.check_defined("var");
  return var(x, detail::all_dims(x.dim()), 1, false);
}

Tensor var(const Tensor& x_in, const std::vector<std::int64_t>& dims, std::int64_t correction, bool keepdim) {
  const Tensor x = x_in.contiguous();
  x.check_defined("var");
  if (correction < 0) fail("var: correction must be non-negative, got {}", correction);
  const detail::ReducePlan plan = detail::plan_reduction(x.shape(), dims, "var");
  // PyTorch divides by max(0, n - correction): one value with correction 1 gives NaN, not an error.
  const double denominator = static_cast<double>(std::max<std::int64_t>(0, plan.count - correction));
  Tensor out = empty(keepdim ? plan.keep : plan.out, x.dtype());
  detail::dispatch_floating(x.dtype(), "var", [&](auto tag) {
    using T = decltype(tag);
    // Note: two passes (mean, then squared deviations) in double: the one-pass sum-of-squares formula
    // loses everything to cancellation when the mean is large against the spread.
    const auto m = static_cast<std::size_t>(out.numel());
    std::vector<double> mean(m, 0.0), squares(m, 0.0);
    const T* in = x.data<T>();
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) { mean[j] += v; });
    for (double& v : mean) v /= static_cast<double>(plan.count);
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) {
      const double d = v - mean[j];
      squares[j] += d * d;
    });
    T* o = out.data<T>();
    for (std::size_t j = 0; j < m; ++j) o[j] = static_cast<T>(squares[j] / denominator);
  });
  return record_if_needed("var", out, {x}, [&] {
    return [sx = SavedTensor(x, "var"), plan, denominator](const Tensor& g, NeedsGrad) {
      // d var / dx = 2 (x - mean) / (n - correction); mean is recomputed with recorded ops
      const Tensor& v = sx.get();
      Tensor centred = sub(v, mean(v, plan.dims, /*keepdim=*/true));
      return std::vector<Tensor>{mul(mul(g.reshape(plan.keep), centred), 2.0 / denominator)};
    };
  });
}

Tensor std_dev(const Tensor& x) { return sqrt(var(x)); }
Tensor std_dev(const Tensor& x, const std::vector<std::int64_t>& dims, std::int64_t correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

}  // namespace tapegrad
