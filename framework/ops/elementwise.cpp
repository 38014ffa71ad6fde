// Arithmetic ops. Each op's forward kernel and its backward closure stand side by side.
#include "framework/ops/elementwise.h"

#include <cmath>

#include "framework/autograd/function.h"
#include "framework/detail/broadcast.h"
#include "framework/detail/dispatch.h"
#include "framework/detail/unary.h"
#include "framework/ops/reduction.h"

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
  Tensor out = empty(out_shape, a.dtype());
  detail::dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    detail::broadcast_binary(a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<T>(), out_shape, f);
  });
  return out;
}

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
      return std::vector<Tensor>{needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(g, sb) : Tensor()};
    };
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "sub", [](auto x, auto y) { return x - y; });
  return record_if_needed("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()] {
    return [sa, sb](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(neg(g), sb) : Tensor()};
    };
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(a, b, "mul", [](auto x, auto y) { return x * y; });
  return record_if_needed("mul", out, {a, b}, [&] {
    return [sa = SavedTensor(a, "mul"), sb = SavedTensor(b, "mul")](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sa.get();
      const Tensor& y = sb.get();
      return std::vector<Tensor>{needs[0] ? sum_to(mul(g, y), x.shape()) : Tensor(),
                                 needs[1] ? sum_to(mul(g, x), y.shape()) : Tensor()};
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
      if (needs[0]) ga = sum_to(div(g, y), x.shape());
      if (needs[1]) gb = sum_to(neg(div(mul(g, x), mul(y, y))), y.shape());  // d(x/y)/dy = -x/y^2
      return std::vector<Tensor>{ga, gb};
    };
  });
}

Tensor add(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "add", [b](auto x) { return static_cast<decltype(x)>(x + b); });
  return record_if_needed("add", out, {a}, [] {
    return [](const Tensor& g, NeedsGrad) { return grads(g); };
  });
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor rsub(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "rsub", [b](auto x) { return static_cast<decltype(x)>(b - x); });
  return record_if_needed("rsub", out, {a}, [] {
    return [](const Tensor& g, NeedsGrad) { return grads(neg(g)); };
  });
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "mul", [b](auto x) { return static_cast<decltype(x)>(x * b); });
  return record_if_needed("mul", out, {a}, [b] {
    return [b](const Tensor& g, NeedsGrad) { return grads(mul(g, b)); };
  });
}

Tensor div(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "div", [b](auto x) { return static_cast<decltype(x)>(x / b); });
  return record_if_needed("div", out, {a}, [b] {
    return [b](const Tensor& g, NeedsGrad) { return grads(div(g, b)); };
  });
}

Tensor rdiv(const Tensor& a, double b) {
  Tensor out = detail::map_floating(a, "rdiv", [b](auto x) { return static_cast<decltype(x)>(b / x); });
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
