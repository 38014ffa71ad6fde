// logsumexp, softmax and log_softmax: fused, max-shifted forward kernels (one record each), fused
// first-order backward kernels, and backward rules composed of recorded ops under create_graph.
#include <tapegrad/framework/ops/softmax.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/reduce.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

// The shift that keeps exp() in range. Note: an infinite maximum is replaced by 0 (as PyTorch), so an
// all -inf slice gives log(0) = -inf and a +inf entry gives +inf instead of inf - inf = NaN.
template <class T>
T finite_shift(T m) {
  return std::isinf(m) ? T(0) : m;
}

enum class Normalise { Softmax, LogSoftmax };

// softmax / log_softmax along the middle dim of [outer, n, inner].
template <class T>
void normalise_kernel(const T* in, T* out, const detail::DimSplit& s, Normalise kind) {
  std::vector<T> shift(static_cast<std::size_t>(s.inner)), total(static_cast<std::size_t>(s.inner));
  for (std::int64_t a = 0; a < s.outer; ++a) {
    const T* x = in + a * s.n * s.inner;
    T* y = out + a * s.n * s.inner;
    std::fill(shift.begin(), shift.end(), -std::numeric_limits<T>::infinity());
    std::fill(total.begin(), total.end(), T(0));
    for (std::int64_t k = 0; k < s.n; ++k)
      for (std::int64_t i = 0; i < s.inner; ++i) shift[i] = std::max(shift[i], x[k * s.inner + i]);
    for (std::int64_t i = 0; i < s.inner; ++i) shift[i] = finite_shift(shift[i]);
    for (std::int64_t k = 0; k < s.n; ++k)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        const T e = std::exp(x[k * s.inner + i] - shift[i]);
        total[i] += e;
        if (kind == Normalise::Softmax) y[k * s.inner + i] = e;
      }
    for (std::int64_t k = 0; k < s.n; ++k)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        T& v = y[k * s.inner + i];
        if (kind == Normalise::Softmax) v /= total[i];
        else v = x[k * s.inner + i] - shift[i] - std::log(total[i]);
      }
  }
}

// First-order backward without recording: softmax  dx = y (g - sum(g y)),  log_softmax  dx = g - exp(y) sum(g).
template <class T>
void normalise_backward_kernel(const T* g, const T* y, T* dx, const detail::DimSplit& s, Normalise kind) {
  std::vector<T> dot(static_cast<std::size_t>(s.inner));
  for (std::int64_t a = 0; a < s.outer; ++a) {
    const std::int64_t base = a * s.n * s.inner;
    std::fill(dot.begin(), dot.end(), T(0));
    for (std::int64_t k = 0; k < s.n; ++k)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        const std::int64_t j = base + k * s.inner + i;
        dot[i] += kind == Normalise::Softmax ? g[j] * y[j] : g[j];
      }
    for (std::int64_t k = 0; k < s.n; ++k)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        const std::int64_t j = base + k * s.inner + i;
        dx[j] = kind == Normalise::Softmax ? y[j] * (g[j] - dot[i]) : g[j] - std::exp(y[j]) * dot[i];
      }
  }
}

Tensor normalise(const Tensor& x_in, std::int64_t dim, Normalise kind) {
  const Tensor x = x_in.contiguous();
  const char* op = kind == Normalise::Softmax ? "softmax" : "log_softmax";
  x.check_defined(op);
  // a 0-dim tensor is a slice of one element (PyTorch accepts dim 0 or -1 for it)
  const std::int64_t nd = normalize_dim(dim, std::max<std::int64_t>(x.dim(), 1), op);
  const detail::DimSplit s = detail::split_at(x.shape(), nd);
  Tensor out = empty(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    normalise_kernel(x.data<T>(), out.data<T>(), s, kind);
  });
  if (trace::active()) trace::annotate(out, {{"dim", nd}});
  return record_if_needed(op, out, {x}, [&] {
    return [sx = SavedTensor(x, op), values = SavedTensor(out.detach(), op), nd, s, kind](const Tensor& g,
                                                                                           NeedsGrad) {
      if (!is_grad_enabled()) {
        Tensor dx = empty(g.shape(), g.dtype());
        detail::dispatch_floating(g.dtype(), "softmax", [&](auto tag) {
          using T = decltype(tag);
          normalise_backward_kernel(g.data<T>(), values.get().data<T>(), dx.data<T>(), s, kind);
        });
        return std::vector<Tensor>{dx};
      }
      // create_graph: the same formulas from recorded ops (softmax recomputed from x, not captured)
      const Tensor& v = sx.get();
      const std::vector<std::int64_t> dims = v.dim() == 0 ? std::vector<std::int64_t>{} : std::vector{nd};
      Tensor y = softmax(v, nd);
      if (kind == Normalise::Softmax) return std::vector<Tensor>{mul(y, sub(g, sum(mul(g, y), dims, true)))};
      return std::vector<Tensor>{sub(g, mul(y, sum(g, dims, true)))};
    };
  });
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) { return normalise(x, dim, Normalise::Softmax); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return normalise(x, dim, Normalise::LogSoftmax); }

Tensor logsumexp(const Tensor& x_in, const std::vector<std::int64_t>& dims, bool keepdim) {
  const Tensor x = x_in.contiguous();
  x.check_defined("logsumexp");
  const detail::ReducePlan plan = detail::plan_reduction(x.shape(), dims, "logsumexp");
  // Note: the shift (the finite maximum) and log(sum(exp(x - shift))) are kept apart for the backward,
  // exp((x - shift) - log_total): their sum rounded to T is off by half an ulp of the shift (0.03 at 1e6 in
  // float32), which would scale every gradient entry by up to e^0.03.
  Tensor shift_values = empty(plan.keep, x.dtype()), log_total = empty(plan.keep, x.dtype());
  Tensor out = empty(keepdim ? plan.keep : plan.out, x.dtype());
  detail::dispatch_floating(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    T* shift = shift_values.data<T>();
    T* lt = log_total.data<T>();
    const auto m = static_cast<std::size_t>(out.numel());
    std::vector<T> total(m, T(0));
    std::fill(shift, shift + m, -std::numeric_limits<T>::infinity());
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) { shift[j] = std::max(shift[j], v); });
    for (std::size_t j = 0; j < m; ++j) shift[j] = finite_shift(shift[j]);
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) { total[j] += std::exp(v - shift[j]); });
    for (std::size_t j = 0; j < m; ++j) {
      lt[j] = std::log(total[j]);
      o[j] = lt[j] + shift[j];
    }
  });
  return record_if_needed("logsumexp", out, {x}, [&] {
    return [sx = SavedTensor(x, "logsumexp"), sshift = SavedTensor(shift_values, "logsumexp"),
            slog = SavedTensor(log_total, "logsumexp"), plan](const Tensor& g, NeedsGrad) {
      // d lse / dx = exp((x - shift) - log_total), the softmax over dims. Under create_graph log_total is
      // recomputed from recorded ops (the shift is a constant: any shift gives the same derivative), so the
      // second derivative reaches x.
      Tensor shifted = sub(sx.get(), sshift.get());
      Tensor lt = is_grad_enabled() ? log(sum(exp(shifted), plan.dims, true)) : slog.get();
      return std::vector<Tensor>{mul(g.reshape(plan.keep), exp(sub(shifted, lt)))};
    };
  });
}

}  // namespace tapegrad
