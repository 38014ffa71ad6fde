#pragma once
/// Activation functions, elementwise and differentiable to any order (formulas as PyTorch).
#include <tapegrad/export.h>
#include <string_view>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// max(x, 0); the gradient at 0 is 0.
Tensor relu(const Tensor& x);
/// x for x > 0, negative_slope * x otherwise.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// In place, as libtorch's torch::relu_ and torch::leaky_relu_ (recorded: see Tensor's in-place ops).
Tensor& relu_(Tensor& x);
Tensor& leaky_relu_(Tensor& x, double negative_slope = 0.01);
/// 1 / (1 + exp(-x)), computed without overflow for large |x|.
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's linear cut-off).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);

/// Which GELU: the exact x * Phi(x) (erf), or PyTorch's tanh approximation.
enum class GeluApproximate { None, Tanh };
/// Gaussian error linear unit.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
/// As libtorch: approximate is "none" or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate);

}  // namespace tapegrad

TAPEGRAD_API_END
