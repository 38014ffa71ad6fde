// Activation functions. Each backward is g * f'(x): a fused kernel on first-order passes, and f' composed
// from recorded ops under create_graph (see detail::unary_backward), so double backward works.
#include <tapegrad/framework/ops/activation.h>

#include <cmath>
#include <string>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/unary.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/detail/derivative.h>
#include <tapegrad/framework/ops/detail/relu_backward.h>
#include <tapegrad/framework/ops/elementwise.h>

namespace tapegrad {

namespace {

constexpr double sqrt_2_over_pi = 0.7978845608028654;      // sqrt(2 / pi), the tanh-GELU scale
constexpr double gelu_kappa = 0.044715;                    // the tanh-GELU cubic coefficient
constexpr double inv_sqrt_2pi = 0.3989422804014327;        // 1 / sqrt(2 pi), the normal density at 0
constexpr double inv_sqrt_2 = 0.7071067811865476;

template <class T>
T stable_sigmoid(T v) {
  // Note: exp of a negative number never overflows; pick the form that needs only that.
  if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
  const T e = std::exp(v);
  return e / (T(1) + e);
}

std::vector<Tensor> one(Tensor g) { return std::vector<Tensor>{std::move(g)}; }

}  // namespace

Tensor relu(const Tensor& x) {
  // Note: "v <= 0 gives 0", not "v > 0 keeps v": a NaN stays NaN, as in PyTorch.
  Tensor out = detail::map_floating(x, "relu", [](auto v) { return v <= decltype(v)(0) ? decltype(v)(0) : v; });
  return record_if_needed("relu", out, {x}, [&] {
    return [sx = SavedTensor(x, "relu")](const Tensor& g, NeedsGrad) {
      return one(detail::relu_backward(g, sx.get()));
    };
  });
}

namespace detail {

Tensor relu_backward(const Tensor& g, const Tensor& values) {
  if (is_grad_enabled()) return masked_fill(g, le(values, 0.0), 0.0);
  return keep_gradient_where(g, values, "relu", [](auto v) { return !(v <= decltype(v)(0)); });
}

}  // namespace detail

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor out = detail::map_floating(x, "leaky_relu", [negative_slope](auto v) {
    return v > decltype(v)(0) ? v : static_cast<decltype(v)>(v * negative_slope);
  });
  if (trace::active()) trace::annotate(out, {{"negative_slope", negative_slope}});
  return record_if_needed("leaky_relu", out, {x}, [&] {
    return [sx = SavedTensor(x, "leaky_relu"), negative_slope](const Tensor& g, NeedsGrad) {
      auto slope = [negative_slope](auto v) {
        using T = decltype(v);
        return v > T(0) ? T(1) : T(negative_slope);
      };
      return one(detail::unary_backward(g, sx.get(), "leaky_relu", slope,
                                        [&] { return detail::map_floating(sx.get(), "leaky_relu", slope); }));
    };
  });
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = detail::map_floating(x, "sigmoid", [](auto v) { return stable_sigmoid(v); });
  return record_if_needed("sigmoid", out, {x}, [&] {
    return [sx = SavedTensor(x, "sigmoid"), values = SavedTensor(out.detach(), "sigmoid")](const Tensor& g,
                                                                                           NeedsGrad) {
      return one(detail::unary_backward(
          g, values.get(), "sigmoid", [](auto s) { return s * (decltype(s)(1) - s); },
          [&] {
            Tensor s = sigmoid(sx.get());
            return mul(s, rsub(s, 1.0));
          }));
    };
  });
}

Tensor tanh(const Tensor& x) {
  Tensor out = detail::map_floating(x, "tanh", [](auto v) { return std::tanh(v); });
  return record_if_needed("tanh", out, {x}, [&] {
    return [sx = SavedTensor(x, "tanh"), values = SavedTensor(out.detach(), "tanh")](const Tensor& g, NeedsGrad) {
      return one(detail::unary_backward(
          g, values.get(), "tanh", [](auto t) { return decltype(t)(1) - t * t; },
          [&] { return rsub(square(tanh(sx.get())), 1.0); }));
    };
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  x.check_defined("softplus");
  if (beta == 0.0) fail("softplus: beta must be non-zero");
  Tensor out = detail::map_floating(x, "softplus", [beta, threshold](auto v) {
    using T = decltype(v);
    const T bx = static_cast<T>(v * beta);
    return bx > T(threshold) ? v : static_cast<T>(std::log1p(std::exp(bx)) / beta);
  });
  if (trace::active()) trace::annotate(out, {{"beta", beta}, {"threshold", threshold}});
  return record_if_needed("softplus", out, {x}, [&] {
    return [sx = SavedTensor(x, "softplus"), beta, threshold](const Tensor& g, NeedsGrad) {
      auto above = [beta, threshold](auto v) {
        using T = decltype(v);
        return static_cast<T>(v * beta) > T(threshold) ? T(1) : T(0);
      };
      return one(detail::unary_backward(
          g, sx.get(), "softplus",
          [beta, threshold](auto v) {
            using T = decltype(v);
            const T bx = static_cast<T>(v * beta);
            return bx > T(threshold) ? T(1) : stable_sigmoid(bx);
          },
          [&] {
            // sigmoid(beta x) below the cut-off, 1 above it; the masks are constants
            Tensor up = detail::map_floating(sx.get(), "softplus", above);
            return add(mul(sigmoid(mul(sx.get(), beta)), rsub(up, 1.0)), up);
          }));
    };
  });
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
    Tensor out = detail::map_floating(x, "gelu", [](auto v) {
      using T = decltype(v);
      const T inner = static_cast<T>(sqrt_2_over_pi) * (v + static_cast<T>(gelu_kappa) * v * v * v);
      return T(0.5) * v * (T(1) + std::tanh(inner));
    });
    if (trace::active()) trace::annotate(out, {{"approximate", std::string("tanh")}});
    return record_if_needed("gelu", out, {x}, [&] {
      return [sx = SavedTensor(x, "gelu")](const Tensor& g, NeedsGrad) {
        return one(detail::unary_backward(
            g, sx.get(), "gelu",
            [](auto v) {
              using T = decltype(v);
              const T k = static_cast<T>(sqrt_2_over_pi), c = static_cast<T>(gelu_kappa);
              const T t = std::tanh(k * (v + c * v * v * v));
              return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
            },
            [&] {
              const Tensor& v = sx.get();
              Tensor t = tanh(mul(add(v, mul(pow(v, 3.0), gelu_kappa)), sqrt_2_over_pi));
              Tensor left = mul(add(t, 1.0), 0.5);
              Tensor right = mul(mul(v, rsub(square(t), 1.0)), mul(add(mul(square(v), 3.0 * gelu_kappa), 1.0),
                                                                   0.5 * sqrt_2_over_pi));
              return add(left, right);
            }));
      };
    });
  }
  Tensor out = detail::map_floating(x, "gelu", [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (T(1) + std::erf(v * static_cast<T>(inv_sqrt_2)));
  });
  return record_if_needed("gelu", out, {x}, [&] {
    return [sx = SavedTensor(x, "gelu")](const Tensor& g, NeedsGrad) {
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      return one(detail::unary_backward(
          g, sx.get(), "gelu",
          [](auto v) {
            using T = decltype(v);
            const T cdf = T(0.5) * (T(1) + std::erf(v * static_cast<T>(inv_sqrt_2)));
            return cdf + v * static_cast<T>(inv_sqrt_2pi) * std::exp(T(-0.5) * v * v);
          },
          [&] {
            const Tensor& v = sx.get();
            Tensor cdf = mul(add(erf(mul(v, inv_sqrt_2)), 1.0), 0.5);
            Tensor pdf = mul(exp(mul(square(v), -0.5)), inv_sqrt_2pi);
            return add(cdf, mul(v, pdf));
          }));
    };
  });
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return gelu(x, GeluApproximate::None);
  if (approximate == "tanh") return gelu(x, GeluApproximate::Tanh);
  fail("gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", std::string(approximate));
}

}  // namespace tapegrad
