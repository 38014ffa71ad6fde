#pragma once
/// check_module_gradients: a RapidCheck property that a module's gradients, with respect to its input and
/// every parameter, match finite differences in training and eval mode.
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/autograd/tape.h>
#include <tapegrad/framework/gradcheck/generators.h>
#include <tapegrad/framework/gradcheck/gradcheck.h>
#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/testing/compare.h>
#include <tapegrad/framework/testing/report.h>

namespace tapegrad::testing {

/// Makes the module under test. The kit calls it once per property case, before drawing the input, so it may
/// draw its options from RapidCheck generators; a second module of the same case is made with clone().
using ModuleFactory = std::function<std::shared_ptr<nn::Module>()>;

/// What check_module_gradients checks.
struct GradientCheckOptions {
  bool train_mode = true;
  bool eval_mode = true;
  /// Also gradgradcheck with respect to the input (second derivatives).
  bool second_order = false;
  /// Random directions per parameter for its directional-derivative check.
  int directions = 2;
  /// Tolerances and step (PyTorch's gradcheck defaults).
  GradcheckOptions gradcheck{};
  /// Prefix of the property names, to tell apart several checks in one TEST_CASE.
  std::string label{};
};

/// Float64 tensors of shapes from `shapes`, values in [low, high] on a grid of (high - low) / 1000.
inline rc::Gen<Tensor> inputs_of(rc::Gen<Shape> shapes, double low = -2.0, double high = 2.0) {
  return rc::gen::mapcat(std::move(shapes), [=](const Shape& s) { return gen::tensor_of_shape(s, low, high); });
}

namespace internal {

inline std::string property_name(const std::string& label, const std::string& rule) {
  return label.empty() ? rule : label + ": " + rule;
}

/// Clones of the values of `entries`, in order.
inline std::vector<Tensor> values_of(const nn::NamedTensors& entries) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : entries) out.push_back(t.detach().clone());
  return out;
}

/// Puts saved values back into the module's buffers, so that a training forward (which updates running
/// statistics) can be evaluated again from the same state.
inline void restore(const nn::NamedTensors& buffers, const std::vector<Tensor>& values) {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    Tensor target = buffers[i].second;
    target.copy_(values[i]);
  }
}

}  // namespace internal

/// Checks one module on one input in one mode, without RapidCheck. The module must already be float64.
/// The input's gradient is checked with gradcheck (every Jacobian element); each parameter's with central
/// differences along `options.directions` random directions (JAX's check_grads), which costs two forwards per
/// direction instead of two per element. Every evaluation starts from the same buffers. On failure the
/// message names the mode and the input or parameter.
inline GradcheckResult module_gradient_check(nn::Module& module, const Tensor& input, bool training,
                                             const GradientCheckOptions& options = {}, std::uint64_t seed = 0) {
  const char* mode = training ? "training" : "eval";
  module.train(training);
  const nn::NamedTensors buffers = module.named_buffers();
  const std::vector<Tensor> saved = internal::values_of(buffers);
  auto run = [&](const Tensor& x) {
    internal::restore(buffers, saved);
    return module(x);
  };
  const Tensor x = is_floating(input.dtype()) ? input.detach().to(DType::Float64) : input.detach();
  if (is_floating(x.dtype())) {
    const TensorFunction f = [&](const std::vector<Tensor>& v) { return run(v[0]); };
    GradcheckResult r = gradcheck(f, {x}, options.gradcheck);
    if (r.ok && options.second_order) r = gradgradcheck(f, {x}, options.gradcheck, seed);
    if (!r.ok) return {false, fmt::format("{} mode, gradient with respect to the input: {}", mode, r.message)};
  }
  const GradcheckOptions& tol = options.gradcheck;
  const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);
  Generator generator(seed);
  for (const auto& [name, parameter] : module.named_parameters()) {
    if (!parameter.requires_grad()) continue;
    if (parameter.dtype() != DType::Float64)
      return {false, fmt::format("parameter '{}' is {}; convert the module with to(DType::Float64) first", name,
                                 dtype_name(parameter.dtype()))};
    Tensor p = parameter;  // the module's own leaf: perturbed in place below, then restored
    for (int d = 0; d < options.directions; ++d) {
      const Tensor y = run(x);
      const Tensor upstream = randn(y.shape(), generator, f64);
      const Tensor g = y.requires_grad()
                           ? autograd::grad({y}, {p}, {upstream}, false, false, /*allow_unused=*/true)[0]
                           : zeros(p.shape(), f64);
      // <upstream, y(p + eps t) - y(p - eps t)> / 2 eps: the derivative of <upstream, y> along t
      auto numeric = [&](const Tensor& t) {
        NoGradGuard no_grad;
        const Tensor original = p.detach().clone();
        p.add_(t, tol.eps);
        const Tensor plus = run(x);
        p.copy_(original);
        p.add_(t, -tol.eps);
        const Tensor minus = run(x);
        p.copy_(original);
        return sum(upstream * (plus - minus)).item() / (2 * tol.eps);
      };
      auto excess = [&](double a, double n) { return std::abs(a - n) - (tol.atol + tol.rtol * std::abs(n)); };
      const Tensor direction = randn(p.shape(), generator, f64);
      const double along = sum(g * direction).item(), expected = numeric(direction);
      if (excess(along, expected) <= 0) continue;
      // Only on failure: every element's derivative, to name the worst one.
      const std::vector<double> analytic = g.to_vector();
      std::int64_t worst = 0;
      double worst_numeric = 0, worst_excess = -INFINITY;
      for (std::int64_t e = 0; e < p.numel(); ++e) {
        Tensor unit = zeros(p.shape(), f64);
        unit.data<double>()[e] = 1.0;
        const double n = numeric(unit), over = excess(analytic[static_cast<std::size_t>(e)], n);
        if (over > worst_excess || std::isnan(over)) worst = e, worst_numeric = n, worst_excess = over;
      }
      return {false, fmt::format("{} mode, gradient with respect to parameter '{}' {}: along a random direction the "
                                 "analytic derivative is {} but central differences give {}; worst element {} {}: "
                                 "analytic {} vs numeric {} (atol {}, rtol {})",
                                 mode, name, shape_string(p.shape()), along, expected, worst,
                                 index_string(p.shape(), worst), analytic[static_cast<std::size_t>(worst)],
                                 worst_numeric, tol.atol, tol.rtol)};
    }
  }
  return {};
}

/// Property, per mode: a fresh module from `make_module`, converted to float64, has the right gradients with
/// respect to its input (drawn from `inputs`) and every parameter that requires grad.
inline void check_module_gradients(const ModuleFactory& make_module, const rc::Gen<Tensor>& inputs,
                                   const GradientCheckOptions& options = {},
                                   std::source_location where = std::source_location::current()) {
  const rc::Gen<Tensor> labelled = inputs.as("input");
  for (const bool training : {true, false}) {
    if (training ? !options.train_mode : !options.eval_mode) continue;
    const std::string name = fmt::format("{} mode: gradients with respect to the input and every parameter",
                                         training ? "training" : "eval");
    internal::property(internal::property_name(options.label, name), where, [=] {
      const std::shared_ptr<nn::Module> module = make_module();
      module->to(DType::Float64);
      const Tensor x = *labelled;
      const auto seed = *rc::gen::arbitrary<std::uint64_t>().as("seed of the random directions");
      const GradcheckResult result = module_gradient_check(*module, x, training, options, seed);
      if (!result.ok)
        internal::fail_case(fmt::format("{}\n\nthe case: an input of shape {}, the module {}", result.message,
                            shape_string(x.shape()), module->repr()));
    });
  }
}

/// The same, with float64 inputs of shapes drawn from `shapes` and values in [-2, 2].
inline void check_module_gradients(const ModuleFactory& make_module, const rc::Gen<Shape>& shapes,
                                   const GradientCheckOptions& options = {},
                                   std::source_location where = std::source_location::current()) {
  check_module_gradients(make_module, inputs_of(shapes), options, where);
}

}  // namespace tapegrad::testing
