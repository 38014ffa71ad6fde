#include <tapegrad/optim/clip_grad.h>

#include <algorithm>
#include <cmath>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

namespace {

// Norm of one grad, accumulated in double. Note: torch.max propagates NaN, so the inf norm does too.
double tensor_norm(const Tensor& grad, double norm_type) {
  return tapegrad::detail::dispatch_floating(grad.dtype(), "clip_grad_norm_", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>(tapegrad::detail::dense_format(grad));
    const std::int64_t n = grad.numel();
    double acc = 0.0;
    if (std::isinf(norm_type)) {
      for (std::int64_t i = 0; i < n; ++i) {
        const double a = std::abs(static_cast<double>(g[i]));
        if (std::isnan(a) || a > acc) acc = a;
        if (std::isnan(acc)) break;
      }
      return acc;
    }
    if (norm_type == 2.0) {
      for (std::int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
      return std::sqrt(acc);
    }
    if (norm_type == 1.0) {
      for (std::int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(g[i]));
      return acc;
    }
    for (std::int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(g[i])), norm_type);
    return std::pow(acc, 1.0 / norm_type);
  });
}

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) fail("{}: parameter {} is undefined", op, i);
    Tensor grad = params[i].grad();
    if (grad.defined()) grads.push_back(grad);
  }
  return grads;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  if (!(norm_type > 0.0))
    fail("clip_grad_norm_: norm_type must be positive or infinity, got {}", detail::python_float(norm_type));
  const std::vector<Tensor> grads = defined_grads(params, "clip_grad_norm_");
  if (grads.empty()) return 0.0;
  std::vector<double> norms;
  for (const Tensor& g : grads) norms.push_back(tensor_norm(g, norm_type));
  // The norm of the per-tensor norms, as PyTorch stacks them.
  double total = 0.0;
  if (std::isinf(norm_type)) {
    for (double n : norms) {
      if (std::isnan(n)) {
        total = n;
        break;
      }
      total = std::max(total, n);
    }
  } else if (norm_type == 2.0) {
    for (double n : norms) total += n * n;
    total = std::sqrt(total);
  } else if (norm_type == 1.0) {
    for (double n : norms) total += n;
  } else {
    for (double n : norms) total += std::pow(n, norm_type);
    total = std::pow(total, 1.0 / norm_type);
  }
  if (error_if_nonfinite && !std::isfinite(total))
    fail("clip_grad_norm_: The total norm of order {} for gradients from `parameters` is non-finite, so it cannot be "
         "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
         "`error_if_nonfinite=False`",
         detail::python_float(norm_type));
  const double coefficient = max_norm / (total + 1e-6);
  if (coefficient >= 1.0) return total;  // PyTorch multiplies by the clamped 1.0: no change
  for (Tensor grad : grads) {
    tapegrad::detail::dispatch_floating(grad.dtype(), "clip_grad_norm_", [&](auto tag) {
      using T = decltype(tag);
      T* g = grad.data<T>(tapegrad::detail::dense_format(grad));
      const T c = static_cast<T>(coefficient);
      for (std::int64_t i = 0; i < grad.numel(); ++i) g[i] = g[i] * c;
    });
    grad.impl()->storage->bump_version();
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  for (Tensor grad : defined_grads(params, "clip_grad_value_")) {
    tapegrad::detail::dispatch_floating(grad.dtype(), "clip_grad_value_", [&](auto tag) {
      using T = decltype(tag);
      T* g = grad.data<T>(tapegrad::detail::dense_format(grad));
      const T high = static_cast<T>(clip_value), low = static_cast<T>(-clip_value);
      for (std::int64_t i = 0; i < grad.numel(); ++i) {
        if (g[i] < low) g[i] = low;
        else if (g[i] > high) g[i] = high;
      }
    });
    grad.impl()->storage->bump_version();
  }
}

}  // namespace tapegrad::optim
