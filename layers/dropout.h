#pragma once
/// nn::Dropout: inverted dropout in training mode, the identity in eval mode, with its own generator.
#include <cstdint>
#include <memory>
#include <string>

#include "framework/module.h"

namespace tapegrad::nn {

/// Options for Dropout: drop probability p (PyTorch's default 0.5) and the seed of the layer's generator.
struct DropoutOptions {
  double p = 0.5;
  std::uint64_t seed = 5489u;
  DropoutOptions& with_p(double value) {
    p = value;
    return *this;
  }
  DropoutOptions& with_seed(std::uint64_t value) {
    seed = value;
    return *this;
  }
};

/// Note: each Dropout owns a Generator seeded from its options, so masks are reproducible and independent
/// of every other random stream (initialisation, data shuffling). clone() copies the generator's state.
class Dropout : public Module {
 public:
  explicit Dropout(DropoutOptions options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions{}.with_p(p)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return options_.p; }
  Generator& generator() { return generator_; }

 private:
  DropoutOptions options_;
  Generator generator_;
};

}  // namespace tapegrad::nn
