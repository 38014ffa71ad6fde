#include <tapegrad/layers/activation.h>

#include <tapegrad/framework/ops/softmax.h>

namespace tapegrad::nn {

// Note: these modules hold no tensors, so clone() is a fresh module with the same options plus the
// training flag (which clone_into copies).
// Note: with inplace, forward writes into the caller's tensor through a copy of its handle (same values, same
// autograd identity), as libtorch's ReLU(inplace=true) does.
Tensor ReLU::forward(const Tensor& input) {
  if (!inplace_) return relu(input);
  Tensor x = input;
  return relu_(x);
}
std::string ReLU::extra_repr() const { return inplace_ ? "inplace=true" : ""; }
std::shared_ptr<Module> ReLU::clone() const { return clone_into(std::make_shared<ReLU>(inplace_)); }

Tensor LeakyReLU::forward(const Tensor& input) {
  if (!inplace_) return leaky_relu(input, negative_slope_);
  Tensor x = input;
  return leaky_relu_(x, negative_slope_);
}
std::string LeakyReLU::extra_repr() const {
  return inplace_ ? fmt::format("negative_slope={}, inplace=true", negative_slope_)
                  : fmt::format("negative_slope={}", negative_slope_);
}
std::shared_ptr<Module> LeakyReLU::clone() const {
  return clone_into(std::make_shared<LeakyReLU>(negative_slope_, inplace_));
}

GELU::GELU(std::string_view approximate) : Module("GELU"), approximate_(GeluApproximate::None) {
  if (approximate == "tanh")
    approximate_ = GeluApproximate::Tanh;
  else if (approximate != "none")
    fail("GELU: approximate must be 'none' or 'tanh', got '{}'", approximate);
}
Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate_); }
std::string GELU::extra_repr() const {
  return fmt::format("approximate='{}'", approximate_ == GeluApproximate::Tanh ? "tanh" : "none");
}
std::shared_ptr<Module> GELU::clone() const { return clone_into(std::make_shared<GELU>(approximate_)); }

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
std::shared_ptr<Module> Sigmoid::clone() const { return clone_into(std::make_shared<Sigmoid>()); }

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
std::shared_ptr<Module> Tanh::clone() const { return clone_into(std::make_shared<Tanh>()); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim_); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim_); }
std::shared_ptr<Module> Softmax::clone() const { return clone_into(std::make_shared<Softmax>(dim_)); }

Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim_); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim_); }
std::shared_ptr<Module> LogSoftmax::clone() const { return clone_into(std::make_shared<LogSoftmax>(dim_)); }

}  // namespace tapegrad::nn
