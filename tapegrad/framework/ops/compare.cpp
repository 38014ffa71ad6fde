// Comparisons (masks, never recorded) and the two mask-driven selections with their backward rules.
#include <tapegrad/framework/ops/compare.h>

#include <type_traits>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

template <class F>
Tensor compare(const Tensor& a, const Tensor& b, const char* op, F f) {
  a.check_defined(op);
  b.check_defined(op);
  if (a.dtype() != b.dtype())
    fail("{}: dtype mismatch between {} {} and {} {}", op, shape_string(a.shape()), dtype_name(a.dtype()),
         shape_string(b.shape()), dtype_name(b.dtype()));
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), op);
  if (a.dtype() == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", op);
  Tensor out = empty(out_shape, a.dtype());
  detail::dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor av = detail::contiguous_values(a), bv = detail::contiguous_values(b);
    detail::broadcast_binary(av.data<T>(), a.shape(), bv.data<T>(), b.shape(), out.data<T>(), out_shape,
                             [&f](T x, T y) { return f(x, y) ? T(1) : T(0); });
  });
  if (trace::active()) trace::report(op, {a, b}, {out});  // never recorded (no gradient), but computed
  return out;
}

template <class F>
Tensor compare(const Tensor& a, double b, const char* op, F f) {
  a.check_defined(op);
  if (a.dtype() == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", op);
  Tensor out = empty(a.shape(), a.dtype());
  detail::dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor av = detail::contiguous_values(a);
    const T* in = av.data<T>();
    T* o = out.data<T>();
    // Note: as PyTorch's type promotion, a float tensor compares against the scalar rounded to its own
    // dtype (float32 0.1f == 0.1 holds), and an int64 tensor compares in double (3 > 2.5 holds).
    double scalar = b;
    if constexpr (!std::is_same_v<T, std::int64_t>) scalar = static_cast<double>(static_cast<T>(b));
    for (std::int64_t i = 0; i < a.numel(); ++i) o[i] = f(static_cast<double>(in[i]), scalar) ? T(1) : T(0);
  });
  if (trace::active()) trace::report(op, {a}, {out}, {{"scalar", b}});
  return out;
}

// The mask as 1/0 values of `dtype`, detached: masks carry no gradient.
Tensor mask_as(const Tensor& mask, DType dtype, const char* op) {
  mask.check_defined(op);
  const Tensor detached = mask.detach();
  if (trace::active()) trace::report("detach", {mask}, {detached});  // the same values: keep the graph connected
  return ne(detached, 0.0).to(dtype);
}

}  // namespace

#define TAPEGRAD_COMPARISON(name, expr)                                                                    \
  Tensor name(const Tensor& a, const Tensor& b) {                                                         \
    return compare(a, b, #name, [](auto x, auto y) { return expr; });                                     \
  }                                                                                                       \
  Tensor name(const Tensor& a, double b) { return compare(a, b, #name, [](double x, double y) { return expr; }); }

TAPEGRAD_COMPARISON(eq, x == y)
TAPEGRAD_COMPARISON(ne, x != y)
TAPEGRAD_COMPARISON(lt, x < y)
TAPEGRAD_COMPARISON(le, x <= y)
TAPEGRAD_COMPARISON(gt, x > y)
TAPEGRAD_COMPARISON(ge, x >= y)
#undef TAPEGRAD_COMPARISON

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
  a.check_defined("where");
  b.check_defined("where");
  if (a.dtype() != b.dtype())
    fail("where: dtype mismatch between {} {} and {} {}", shape_string(a.shape()), dtype_name(a.dtype()),
         shape_string(b.shape()), dtype_name(b.dtype()));
  const Tensor m = mask_as(mask, a.dtype(), "where");
  const Shape ab = broadcast_shapes(a.shape(), b.shape(), "where");
  const Shape out_shape = broadcast_shapes(m.shape(), ab, "where");
  if (a.dtype() == DType::BFloat16)
    fail("{}: bfloat16 is not supported by this op: convert with .to(DType::Float32)", "where");
  Tensor out = empty(out_shape, a.dtype());
  detail::dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t n = shape_numel(out_shape);
    const T* pm = m.data<T>();
    const Tensor av = detail::contiguous_values(a), bv = detail::contiguous_values(b);
    const T* pa = av.data<T>();
    const T* pb = bv.data<T>();
    T* o = out.data<T>();
    if (m.numel() == n && a.numel() == n && b.numel() == n) {
      for (std::int64_t i = 0; i < n; ++i) o[i] = pm[i] != T(0) ? pa[i] : pb[i];
      return;
    }
    if (n == 0) return;
    // general broadcast: one odometer over the output, three stride sets
    const Shape sm = detail::broadcast_strides(m.shape(), out_shape), sa = detail::broadcast_strides(a.shape(), out_shape),
                sb = detail::broadcast_strides(b.shape(), out_shape);
    const std::size_t ndim = out_shape.size();
    std::vector<std::int64_t> index(ndim, 0);
    std::int64_t om = 0, oa = 0, ob = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      o[i] = pm[om] != T(0) ? pa[oa] : pb[ob];
      for (std::size_t d = ndim; d-- > 0;) {
        om += sm[d];
        oa += sa[d];
        ob += sb[d];
        if (++index[d] < out_shape[d]) break;
        om -= sm[d] * out_shape[d];
        oa -= sa[d] * out_shape[d];
        ob -= sb[d] * out_shape[d];
        index[d] = 0;
      }
    }
  });
  if (!is_floating(a.dtype())) return out;
  if (trace::active()) trace::annotate(out, {{"condition", m}});
  return record_if_needed("where", out, {a, b}, [&] {
    return [sm = SavedTensor(m, "where"), sa = a.shape(), sb = b.shape()](const Tensor& g, NeedsGrad needs) {
      // Note: selecting (not multiplying by the mask) keeps an inf or NaN gradient in the unselected
      // branch from leaking through as NaN, as PyTorch's where does.
      const Tensor zero = scalar_tensor(0.0, g.dtype());
      return std::vector<Tensor>{needs[0] ? sum_to(where(sm.get(), g, zero), sa) : Tensor(),
                                 needs[1] ? sum_to(where(sm.get(), zero, g), sb) : Tensor()};
    };
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  x.check_defined("masked_fill");
  mask.check_defined("masked_fill");
  if (x.dtype() == DType::BFloat16)
    fail("masked_fill: bfloat16 is not supported by this op: convert with .to(DType::Float32) (shape {})",
         shape_string(x.shape()));
  if (broadcast_shapes(x.shape(), mask.shape(), "masked_fill") != x.shape())
    fail("masked_fill: mask of shape {} does not broadcast to the input's shape {}", shape_string(mask.shape()),
         shape_string(x.shape()));
  const Tensor m = mask_as(mask, x.dtype(), "masked_fill");
  Tensor out = empty(x.shape(), x.dtype());
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor xv = detail::contiguous_values(x);
    detail::broadcast_binary(xv.data<T>(), x.shape(), m.data<T>(), m.shape(), out.data<T>(), x.shape(),
                             [v = static_cast<T>(value)](T xv, T mv) { return mv != T(0) ? v : xv; });
  });
  if (!is_floating(x.dtype())) return out;
  if (trace::active()) trace::annotate(out, {{"mask", m}, {"value", value}});
  return record_if_needed("masked_fill", out, {x}, [&] {
    return [sm = SavedTensor(m, "masked_fill")](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{masked_fill(g, sm.get(), 0.0)};
    };
  });
}

}  // namespace tapegrad
