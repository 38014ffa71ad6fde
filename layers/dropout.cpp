#include "layers/dropout.h"

#include "framework/ops/dropout.h"

namespace tapegrad::nn {

Dropout::Dropout(DropoutOptions options) : Module("Dropout"), options_(options), generator_(options.seed) {
  if (!(options.p >= 0.0 && options.p <= 1.0))
    fail("Dropout: probability has to be between 0 and 1, but got {}", options.p);
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, options_.p, is_training(), generator_); }

std::string Dropout::extra_repr() const { return fmt::format("p={}", options_.p); }

std::shared_ptr<Module> Dropout::clone() const {
  auto copy = std::make_shared<Dropout>(options_);
  copy->generator_ = generator_;
  return clone_into(copy);
}

}  // namespace tapegrad::nn
