#pragma once
/// Activation modules: stateless wrappers around the activation ops, so they can sit in a Sequential.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/activation.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// libtorch's ReLUOptions: `inplace` makes forward write into its input (relu_) instead of allocating.
struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT: implicit, as libtorch's
  ReLUOptions& inplace(bool value) { inplace_ = value; return *this; }
  bool inplace() const { return inplace_; }

 private:
  bool inplace_;
};

/// max(x, 0); with inplace, written into the input (recorded like relu_, so the input must not be a leaf that
/// requires grad).
class ReLU : public Module {
 public:
  explicit ReLU(ReLUOptions options = {}) : Module("ReLU"), inplace_(options.inplace()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  bool inplace() const { return inplace_; }

 private:
  bool inplace_;
};

/// libtorch's LeakyReLUOptions.
struct LeakyReLUOptions {
  LeakyReLUOptions& negative_slope(double value) { negative_slope_ = value; return *this; }
  LeakyReLUOptions& inplace(bool value) { inplace_ = value; return *this; }
  double negative_slope() const { return negative_slope_; }
  bool inplace() const { return inplace_; }

 private:
  double negative_slope_ = 0.01;
  bool inplace_ = false;
};

/// x for x > 0, negative_slope * x otherwise; with inplace, written into the input (leaky_relu_).
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01, bool inplace = false)
      : Module("LeakyReLU"), negative_slope_(negative_slope), inplace_(inplace) {}
  explicit LeakyReLU(const LeakyReLUOptions& options) : LeakyReLU(options.negative_slope(), options.inplace()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double negative_slope() const { return negative_slope_; }
  bool inplace() const { return inplace_; }

 private:
  double negative_slope_;
  bool inplace_;
};

/// Gaussian error linear unit, exact (erf) or with PyTorch's tanh approximation.
class GELU : public Module {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : Module("GELU"), approximate_(approximate) {}
  /// "none" or "tanh", as PyTorch.
  explicit GELU(std::string_view approximate);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  GeluApproximate approximate_;
};

/// 1 / (1 + exp(-x)).
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

/// softmax along `dim` (negative counts from the end).
class Softmax : public Module {
 public:
  explicit Softmax(std::int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::int64_t dim_;
};

/// log_softmax along `dim` (negative counts from the end).
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(std::int64_t dim) : Module("LogSoftmax"), dim_(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::int64_t dim_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
