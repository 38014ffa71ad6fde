// layer_norm: a fused two-pass forward (mean, then centred variance, per row) and a fused backward.
// Note: the first-order backward is a raw kernel; under create_graph (grad mode on during backward) the same
// formula is built from recorded ops, so second derivatives are available. Tests check both paths.
#include <tapegrad/framework/ops/layer_norm.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

void check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias) {
  x.check_defined("layer_norm");
  if (normalized_shape.empty()) fail("layer_norm: expected normalized_shape to be at least 1-dimensional");
  const auto k = normalized_shape.size();
  const Shape& s = x.shape();
  if (s.size() < k ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), s.end() - static_cast<std::ptrdiff_t>(k)))
    fail("layer_norm: expected input [*, {}] for normalized_shape {}, got {}", fmt::join(normalized_shape, ", "),
         shape_string(normalized_shape), shape_string(s));
  for (const auto& [name, t] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
    if (!t->defined()) continue;
    if (t->shape() != normalized_shape)
      fail("layer_norm: {} has shape {}, expected normalized_shape {}", name, shape_string(t->shape()),
           shape_string(normalized_shape));
    if (t->dtype() != x.dtype())
      fail("layer_norm: {} is {} but input is {}", name, dtype_name(t->dtype()), dtype_name(x.dtype()));
  }
}

std::vector<std::int64_t> trailing_dims(std::size_t k) {
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < k; ++i) dims.push_back(-static_cast<std::int64_t>(k - i));
  return dims;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous(), bias = bias_in.contiguous();
  check_layer_norm(x, normalized_shape, weight, bias);
  const std::int64_t width = shape_numel(normalized_shape);
  const std::int64_t rows = width == 0 ? 0 : x.numel() / width;
  Tensor out = empty(x.shape(), x.dtype());
  Tensor mean_t = empty({rows}, x.dtype()), rstd_t = empty({rows}, x.dtype());
  detail::dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T *po = out.data<T>(), *pm = mean_t.data<T>(), *pr = rstd_t.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * width;
      // Note: two passes (mean, then the centred sum of squares) in double avoid the cancellation of
      // E[x^2] - E[x]^2 when the mean is large compared with the spread.
      double total = 0.0;
      for (std::int64_t j = 0; j < width; ++j) total += row[j];
      const double mu = total / static_cast<double>(width);
      double squares = 0.0;
      for (std::int64_t j = 0; j < width; ++j) squares += (row[j] - mu) * (row[j] - mu);
      const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
      pm[r] = static_cast<T>(mu);
      pr[r] = static_cast<T>(rstd);
      T* o = po + r * width;
      for (std::int64_t j = 0; j < width; ++j) {
        T v = static_cast<T>((row[j] - mu) * rstd);
        if (pw) v *= pw[j];
        if (pb) v += pb[j];
        o[j] = v;
      }
    }
  });
  std::vector<Tensor> inputs{x};
  const std::size_t weight_index = weight.defined() ? inputs.size() : 0;
  if (weight.defined()) inputs.push_back(weight);
  const std::size_t bias_index = bias.defined() ? inputs.size() : 0;
  if (bias.defined()) inputs.push_back(bias);
  if (trace::active())
    trace::annotate(out, {{"axis", -static_cast<std::int64_t>(normalized_shape.size())},
                          {"eps", eps},
                          {"weight", weight},
                          {"bias", bias}});
  return record_if_needed("layer_norm", out, inputs, [&] {
    return [sx = SavedTensor(x, "layer_norm"),
            sw = weight.defined() ? SavedTensor(weight, "layer_norm") : SavedTensor(),
            smean = SavedTensor(mean_t, "layer_norm"), srstd = SavedTensor(rstd_t, "layer_norm"), normalized_shape, eps,
            has_weight = weight.defined(), has_bias = bias.defined(), weight_index, bias_index,
            n_inputs = inputs.size(), rows, width](const Tensor& g, NeedsGrad needs) {
      std::vector<Tensor> grads(n_inputs);
      const Tensor& xv = sx.get();
      if (is_grad_enabled()) {
        // create_graph: the same formula from recorded ops, differentiable in x, weight and g.
        const auto dims = trailing_dims(normalized_shape.size());
        Tensor centred = sub(xv, mean(xv, dims, true));
        Tensor rstd = pow(add(mean(square(centred), dims, true), eps), -0.5);
        Tensor xhat = mul(centred, rstd);
        if (needs[0]) {
          Tensor dxhat = has_weight ? mul(g, sw.get()) : g;
          grads[0] = mul(rstd, sub(sub(dxhat, mean(dxhat, dims, true)), mul(xhat, mean(mul(dxhat, xhat), dims, true))));
        }
        if (has_weight && needs[weight_index]) grads[weight_index] = sum_to(mul(g, xhat), normalized_shape);
        if (has_bias && needs[bias_index]) grads[bias_index] = sum_to(g, normalized_shape);
        return grads;
      }
      Tensor dx = empty(xv.shape(), xv.dtype());
      Tensor dw = zeros(normalized_shape, TensorOptions{}.with_dtype(xv.dtype()));
      Tensor db = zeros(normalized_shape, TensorOptions{}.with_dtype(xv.dtype()));
      detail::dispatch_floating(xv.dtype(), "layer_norm", [&](auto tag) {
        using T = decltype(tag);
        const T* px = xv.data<T>();
        const T* pg = g.data<T>();
        const T* pw = has_weight ? sw.get().template data<T>() : nullptr;
        const T* pm = smean.get().template data<T>();
        const T* pr = srstd.get().template data<T>();
        T *pdx = dx.data<T>(), *pdw = dw.data<T>(), *pdb = db.data<T>();
        for (std::int64_t r = 0; r < rows; ++r) {
          const T* row = px + r * width;
          const T* grow = pg + r * width;
          const double mu = pm[r], rstd = pr[r];
          // mean of dxhat and of dxhat * xhat over the row, where dxhat = g * weight
          double sum_d = 0.0, sum_dx = 0.0;
          for (std::int64_t j = 0; j < width; ++j) {
            const double xhat = (row[j] - mu) * rstd;
            const double d = pw ? grow[j] * pw[j] : grow[j];
            sum_d += d;
            sum_dx += d * xhat;
            pdw[j] += static_cast<T>(grow[j] * xhat);
            pdb[j] += grow[j];
          }
          const double mean_d = sum_d / static_cast<double>(width), mean_dx = sum_dx / static_cast<double>(width);
          for (std::int64_t j = 0; j < width; ++j) {
            const double xhat = (row[j] - mu) * rstd;
            const double d = pw ? grow[j] * pw[j] : grow[j];
            pdx[r * width + j] = static_cast<T>(rstd * (d - mean_d - xhat * mean_dx));
          }
        }
      });
      if (needs[0]) grads[0] = dx;
      if (has_weight && needs[weight_index]) grads[weight_index] = dw;
      if (has_bias && needs[bias_index]) grads[bias_index] = db;
      return grads;
    };
  });
}

}  // namespace tapegrad
