#include <tapegrad/framework/gradcheck/gradcheck.h>

#include <cmath>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/autograd/tape.h>

namespace tapegrad {

namespace {

struct Prepared {
  std::vector<Tensor> leaves;        // fresh leaves, requiring grad where checked
  std::vector<std::size_t> checked;  // which inputs are differentiated
};

Prepared prepare(const std::vector<Tensor>& inputs, const char* op) {
  Prepared p;
  bool any_marked = false;
  for (const Tensor& input : inputs) any_marked = any_marked || (input.defined() && input.requires_grad());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    input.check_defined(op);
    const bool check = is_floating(input.dtype()) && (any_marked ? input.requires_grad() : true);
    if (check && input.dtype() != DType::Float64)
      fail("{}: input {} is {}; finite differences need float64 inputs", op, i, dtype_name(input.dtype()));
    Tensor leaf = input.detach().clone();
    if (check) {
      leaf.requires_grad_(true);
      p.checked.push_back(i);
    }
    p.leaves.push_back(leaf);
  }
  if (p.checked.empty()) fail("{}: no floating input to check", op);
  return p;
}

Tensor evaluate(const TensorFunction& f, const std::vector<Tensor>& inputs, const char* op) {
  Tensor y = f(inputs);
  y.check_defined(op);
  if (y.dtype() != DType::Float64) fail("{}: the function returned {}, expected float64", op, dtype_name(y.dtype()));
  return y;
}

}  // namespace

GradcheckResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  Prepared p = prepare(inputs, "gradcheck");
  Tensor y = evaluate(f, p.leaves, "gradcheck");
  const std::int64_t m = y.numel();
  std::vector<Tensor> wrt;
  for (std::size_t i : p.checked) wrt.push_back(p.leaves[i]);

  // analytic[k][j] holds d y_k / d input_j as a flat vector, one backward per output element
  std::vector<std::vector<std::vector<double>>> analytic(static_cast<std::size_t>(m));
  if (y.requires_grad()) {
    for (std::int64_t k = 0; k < m; ++k) {
      Tensor seed = zeros(y.shape(), TensorOptions{}.with_dtype(DType::Float64));
      seed.data<double>()[k] = 1.0;
      std::vector<Tensor> g = autograd::grad({y}, wrt, {seed}, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (const Tensor& gj : g) analytic[static_cast<std::size_t>(k)].push_back(gj.to_vector());
    }
  } else {
    for (std::int64_t k = 0; k < m; ++k)
      for (const Tensor& w : wrt) analytic[static_cast<std::size_t>(k)].emplace_back(w.numel(), 0.0);
  }

  GradcheckResult result;
  double worst_excess = 0;
  NoGradGuard no_grad;
  for (std::size_t c = 0; c < p.checked.size(); ++c) {
    const std::size_t i = p.checked[c];
    for (std::int64_t e = 0; e < p.leaves[i].numel(); ++e) {
      std::vector<Tensor> plus = p.leaves, minus = p.leaves;
      plus[i] = p.leaves[i].detach().clone();
      minus[i] = p.leaves[i].detach().clone();
      plus[i].data<double>()[e] += options.eps;
      minus[i].data<double>()[e] -= options.eps;
      const std::vector<double> yp = evaluate(f, plus, "gradcheck").to_vector();
      const std::vector<double> ym = evaluate(f, minus, "gradcheck").to_vector();
      for (std::int64_t k = 0; k < m; ++k) {
        const double numeric = (yp[k] - ym[k]) / (2 * options.eps);
        const double a = analytic[static_cast<std::size_t>(k)][c][static_cast<std::size_t>(e)];
        const double excess = std::abs(a - numeric) - (options.atol + options.rtol * std::abs(numeric));
        if (!(excess <= 0) && (result.ok || excess > worst_excess || std::isnan(excess))) {
          result.ok = false;
          worst_excess = excess;
          result.message = fmt::format(
              "gradcheck: Jacobian mismatch for input {} (shape {}), element {}, output element {}: analytic {} vs "
              "numeric {} (atol {}, rtol {})",
              i, shape_string(p.leaves[i].shape()), e, k, a, numeric, options.atol, options.rtol);
        }
      }
    }
  }
  if (!result.ok || !options.check_zero_upstream || !y.requires_grad()) return result;

  GradModeGuard grad_mode(true);
  std::vector<Tensor> g = autograd::grad({y}, wrt, {zeros_like(y)}, false, false, true);
  for (std::size_t c = 0; c < g.size(); ++c)
    for (double v : g[c].to_vector())
      if (v != 0.0) {
        result.ok = false;
        result.message = fmt::format("gradcheck: a zero upstream gradient gave a non-zero gradient {} for input {}", v,
                                     p.checked[c]);
        return result;
      }
  return result;
}

GradcheckResult gradgradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options, std::uint64_t seed) {
  Prepared p = prepare(inputs, "gradgradcheck");
  Tensor y0 = evaluate(f, p.leaves, "gradgradcheck");
  Generator generator(seed);
  const Tensor upstream = randn(y0.shape(), generator, TensorOptions{}.with_dtype(DType::Float64));
  GradcheckOptions inner = options;
  inner.check_zero_upstream = false;
  for (std::size_t c = 0; c < p.checked.size(); ++c) {
    const std::size_t i = p.checked[c];
    const std::vector<std::size_t> checked = p.checked;
    TensorFunction first_derivative = [&f, upstream, checked, c](const std::vector<Tensor>& xs) {
      GradModeGuard grad_mode(true);  // the numeric pass evaluates under NoGradGuard; this needs the tape
      std::vector<Tensor> wrt;
      std::vector<Tensor> leaves = xs;
      for (std::size_t j : checked) {
        if (!leaves[j].requires_grad()) leaves[j] = leaves[j].detach().requires_grad_(true);
        wrt.push_back(leaves[j]);
      }
      Tensor y = f(leaves);
      if (!y.requires_grad()) return zeros(xs[checked[c]].shape(), TensorOptions{}.with_dtype(DType::Float64));
      return autograd::grad({y}, wrt, {upstream}, true, /*create_graph=*/true, /*allow_unused=*/true)[c];
    };
    std::vector<Tensor> marked = p.leaves;
    GradcheckResult r = gradcheck(first_derivative, marked, inner);
    if (!r.ok) {
      r.message = fmt::format("gradgradcheck (gradient of input {}): {}", i, r.message);
      return r;
    }
  }
  return GradcheckResult{};
}

}  // namespace tapegrad
