#pragma once
/// Gradient checking against central finite differences, for tapegrad's own ops and for users' layers.
#include <tapegrad/export.h>
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// PyTorch's gradcheck defaults: e = 1e-6 central differences, |analytic - numeric| <= atol + rtol*|numeric|.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  /// Also require that a zero upstream gradient gives zero input gradients.
  bool check_zero_upstream = true;
};

/// Outcome of a check; on failure `message` names the worst element (input, element, analytic vs numeric).
struct GradcheckResult {
  bool ok = true;
  std::string message;
  explicit operator bool() const { return ok; }
};

/// The function under test: float64 inputs to one float64 output.
using TensorFunction = std::function<Tensor(const std::vector<Tensor>&)>;

/// Compares the Jacobian from backward with central differences, for every input that requires grad
/// (all floating inputs when none does). Inputs must be float64.
GradcheckResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

/// Checks second derivatives: the gradient of f (taken with create_graph, against a fixed random upstream
/// gradient) is itself gradient-checked with respect to the inputs.
GradcheckResult gradgradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {}, std::uint64_t seed = 0);

}  // namespace tapegrad

TAPEGRAD_API_END
