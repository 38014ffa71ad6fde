// Arithmetic ops. Each op's forward kernel and its backward closure stand side by side.
#include <tapegrad/framework/ops/elementwise.h>

#include <cmath>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/unary.h>
#include <tapegrad/framework/ops/detail/derivative.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

// The forward of every tensor-tensor arithmetic op: checks, broadcast shape, typed loop.
template <class F>
Tensor binary_kernel(const Tensor& a, const Tensor& b, const char* op, F f) {
  a.check_defined(op);
  b.check_defined(op);
  if (a.dtype() != b.dtype())
    fail("{}: dtype mismatch between {} {} and {} {}", op, shape_string(a.shape()), dtype_name(a.dtype()),
         shape_string(b.shape()), dtype_name(b.dtype()));
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), op);
  if (detail::elementwise_output_format({&a, &b}, out_shape) == MemoryFormat::ChannelsLast) {
    // Note: PyTorch's rule (TensorIterator) made the result channels-last. The loop runs over NHWC-ordered
    // operands, so channels-last inputs are read where they lie and a broadcast bias [1, C, 1, 1] is the
    // innermost, contiguous operand.
    Tensor out = empty(out_shape, a.dtype(), MemoryFormat::ChannelsLast);
    const Tensor an = detail::nhwc_operand(a), bn = detail::nhwc_operand(b);
    detail::dispatch_floating(a.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      detail::broadcast_binary(an.data<T>(MemoryFormat::ChannelsLast), detail::nhwc_shape(a.shape()),
                               bn.data<T>(MemoryFormat::ChannelsLast), detail::nhwc_shape(b.shape()),
                               out.data<T>(MemoryFormat::ChannelsLast), detail::nhwc_shape(out_shape), f);
    });
    return out;
  }
  Tensor out = empty(out_shape, a.dtype());
  detail::dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Tensor a_copy, b_copy;  // only for strided views; a contiguous input is read where it lies
    const Tensor& av = a.is_contiguous() ? a : (a_copy = a.contiguous());
    const Tensor& bv = b.is_contiguous() ? b : (b_copy = b.contiguous());
    detail::broadcast_binary(av.data<T>(), a.shape(), bv.data<T>(), b.shape(), out.data<T>(), out_shape, f);
  });
  return out;
}

// An operand's share of a broadcast op's gradient: g summed over the dims broadcasting added.
// Note: an operand of the output's shape takes g as is, in g's format: sum_to would hand back a row-major copy of
// a channels-last g, which the next backward (BatchNorm's, relu's, a residual join's) would convert back. PyTorch
// passes the gradient through here too.
Tensor reduce_to(const Tensor& g, const Shape& shape) { return g.shape() == shape ? g : sum_to(g, shape); }

std::vector<Tensor> grads(Tensor a, Tensor b = Tensor()) {
  std::vector<Tensor> result{std::move(a)};
  if (b.defined()) result.push_back(std::move(b));
  return result;
}

}  // namespace

Tensor neg(const Tensor& x) {
  Tensor out = detail::map_floating(x, "neg", [](auto v) { return -v; });
  return record_if_needed("neg", out, {x}, [] {
    return [](const Tensor& g, NeedsGrad) { return grads(neg(g)); };
  });
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "add", [](auto x, auto y) { return x + y; });
  return record_if_needed("add", out, {a, b}, [sa = a.shape(), sb = b.shape()] {
    return [sa, sb](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? reduce_to(g, sa) : Tensor(), needs[1] ? reduce_to(g, sb) : Tensor()};
    };
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "sub", [](auto x, auto y) { return x - y; });
  return record_if_needed("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()] {
    return [sa, sb](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? reduce_to(g, sa) : Tensor(),
                                 needs[1] ? reduce_to(neg(g), sb) : Tensor()};
    };
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "mul", [](auto x, auto y) { return x * y; });
  return record_if_needed("mul", out, {a, b}, [&] {
    return [sa = SavedTensor(a, "mul"), sb = SavedTensor(b, "mul")](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sa.get();
      const Tensor& y = sb.get();
      return std::vector<Tensor>{needs[0] ? reduce_to(mul(g, y), x.shape()) : Tensor(),
                                 needs[1] ? reduce_to(mul(g, x), y.shape()) : Tensor()};
    };
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "div", [](auto x, auto y) { return x / y; });
  return record_if_needed("div", out, {a, b}, [&] {
    return [sa = SavedTensor(a, "div"), sb = SavedTensor(b, "div")](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sa.get();
      const Tensor& y = sb.get();
      Tensor ga, gb;
      if (needs[0]) ga = reduce_to(div(g, y), x.shape());
      if (needs[1]) gb = reduce_to(neg(div(mul(g, x), mul(y, y))), y.shape());  // d(x/y)/dy = -x/y^2
      return std::vector<Tensor>{ga, gb};
    };
  });
}

Tensor add(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "add", [b](auto x) { return static_cast<decltype(x)>(x + b); });
  if (trace::active()) trace::annotate(out, {{"scalar", b}});
  return record_if_needed("add", out, {a}, [] {
    return [](const Tensor& g, NeedsGrad) { return grads(g); };
  });
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor rsub(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "rsub", [b](auto x) { return static_cast<decltype(x)>(b - x); });
  if (trace::active()) trace::annotate(out, {{"scalar", b}});
  return record_if_needed("rsub", out, {a}, [] {
    return [](const Tensor& g, NeedsGrad) { return grads(neg(g)); };
  });
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "mul", [b](auto x) { return static_cast<decltype(x)>(x * b); });
  if (trace::active()) trace::annotate(out, {{"scalar", b}});
  return record_if_needed("mul", out, {a}, [b] {
    return [b](const Tensor& g, NeedsGrad) { return grads(mul(g, b)); };
  });
}

Tensor div(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "div", [b](auto x) { return static_cast<decltype(x)>(x / b); });
  if (trace::active()) trace::annotate(out, {{"scalar", b}});
  return record_if_needed("div", out, {a}, [b] {
    return [b](const Tensor& g, NeedsGrad) { return grads(div(g, b)); };
  });
}

Tensor rdiv(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "rdiv", [b](auto x) { return static_cast<decltype(x)>(b / x); });
  if (trace::active()) trace::annotate(out, {{"scalar", b}});
  return record_if_needed("rdiv", out, {a}, [&] {
    return [sa = SavedTensor(a, "rdiv"), b](const Tensor& g, NeedsGrad) {
      const Tensor& x = sa.get();
      return grads(div(mul(g, -b), mul(x, x)));  // d(b/x)/dx = -b/x^2
    };
  });
}

Tensor exp(const Tensor& x) {
  Tensor out = detail::map_floating(x, "exp", [](auto v) { return std::exp(v); });
  return record_if_needed("exp", out, {x}, [&] {
    // First order reuses the output's values; under create_graph exp(x) is recomputed so that the
    // second derivative flows back to x (the output itself must not be captured).
    return [sx = SavedTensor(x, "exp"), values = SavedTensor(out.detach(), "exp")](const Tensor& g, NeedsGrad) {
      return grads(mul(g, is_grad_enabled() ? exp(sx.get()) : values.get()));
    };
  });
}

Tensor log(const Tensor& x) {
  Tensor out = detail::map_floating(x, "log", [](auto v) { return std::log(v); });
  return record_if_needed("log", out, {x}, [&] {
    return [sx = SavedTensor(x, "log")](const Tensor& g, NeedsGrad) { return grads(div(g, sx.get())); };
  });
}

}  // namespace tapegrad

// ---- powers, roots, magnitudes ----
namespace tapegrad {

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = exponent == 2.0 ? detail::map_floating(x, "pow", [](auto v) { return v * v; })
                               : detail::map_floating(x, "pow", [exponent](auto v) {
                                   return static_cast<decltype(v)>(std::pow(v, static_cast<decltype(v)>(exponent)));
                                 });
  if (trace::active()) trace::annotate(out, {{"exponent", exponent}});
  return record_if_needed("pow", out, {x}, [&] {
    return [sx = SavedTensor(x, "pow"), exponent](const Tensor& g, NeedsGrad) {
      // d x^p / dx = p x^(p-1); p = 0 is a constant, whose gradient is zero (PyTorch returns zeros too)
      if (exponent == 0.0) return grads(zeros_like(g));
      if (exponent == 1.0) return grads(g);
      return grads(mul(g, mul(pow(sx.get(), exponent - 1.0), exponent)));
    };
  });
}

Tensor sqrt(const Tensor& x) {
  Tensor out = detail::map_floating(x, "sqrt", [](auto v) { return std::sqrt(v); });
  return record_if_needed("sqrt", out, {x}, [&] {
    return [sx = SavedTensor(x, "sqrt"), values = SavedTensor(out.detach(), "sqrt")](const Tensor& g, NeedsGrad) {
      return grads(detail::unary_backward(
          g, values.get(), "sqrt", [](auto y) { return static_cast<decltype(y)>(0.5) / y; },
          [&] { return rdiv(sqrt(sx.get()), 0.5); }));
    };
  });
}

Tensor square(const Tensor& x) {
  Tensor out = detail::map_floating(x, "square", [](auto v) { return v * v; });
  return record_if_needed("square", out, {x}, [&] {
    return [sx = SavedTensor(x, "square")](const Tensor& g, NeedsGrad) { return grads(mul(g, mul(sx.get(), 2.0))); };
  });
}

Tensor reciprocal(const Tensor& x) { return rdiv(x, 1.0); }

Tensor sign(const Tensor& x) {
  return detail::map_floating(x, "sign", [](auto v) {
    using T = decltype(v);
    return v > T(0) ? T(1) : (v < T(0) ? T(-1) : (v == T(0) ? T(0) : v));  // NaN stays NaN
  });
}

Tensor abs(const Tensor& x) {
  Tensor out = detail::map_floating(x, "abs", [](auto v) { return std::abs(v); });
  return record_if_needed("abs", out, {x}, [&] {
    return [sx = SavedTensor(x, "abs")](const Tensor& g, NeedsGrad) {
      return grads(detail::unary_backward(
          g, sx.get(), "abs",
          [](auto v) {
            using T = decltype(v);
            return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
          },
          [&] { return sign(sx.get()); }));
    };
  });
}

Tensor erf(const Tensor& x) {
  Tensor out = detail::map_floating(x, "erf", [](auto v) { return std::erf(v); });
  return record_if_needed("erf", out, {x}, [&] {
    return [sx = SavedTensor(x, "erf")](const Tensor& g, NeedsGrad) {
      constexpr double two_over_sqrt_pi = 1.1283791670955126;  // d erf(x)/dx = 2/sqrt(pi) exp(-x^2)
      return grads(detail::unary_backward(
          g, sx.get(), "erf",
          [](auto v) { return static_cast<decltype(v)>(two_over_sqrt_pi * std::exp(-double(v) * double(v))); },
          [&] { return mul(exp(neg(square(sx.get()))), two_over_sqrt_pi); }));
    };
  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  x.check_defined("clamp");
  if (min && max && *min > *max) fail("clamp: min {} is greater than max {}", *min, *max);
  const double lo = min.value_or(-INFINITY), hi = max.value_or(INFINITY);
  // Note: written with < and > so that NaN passes through unchanged, as in PyTorch.
  Tensor out = detail::map_floating(x, "clamp", [lo, hi](auto v) {
    using T = decltype(v);
    return v < T(lo) ? T(lo) : (v > T(hi) ? T(hi) : v);
  });
  if (trace::active()) trace::annotate(out, {{"min", lo}, {"max", hi}});
  return record_if_needed("clamp", out, {x}, [&] {
    return [sx = SavedTensor(x, "clamp"), lo, hi](const Tensor& g, NeedsGrad) {
      // The pass-through mask has no derivative, so the fused kernel serves both orders.
      Tensor mask = detail::map_floating(sx.get(), "clamp", [lo, hi](auto v) {
        using T = decltype(v);
        return v >= T(lo) && v <= T(hi) ? T(1) : T(0);
      });
      return grads(mul(g, mask));
    };
  });
}

}  // namespace tapegrad
