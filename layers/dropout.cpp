#include "layers/dropout.h"

#include <algorithm>

#include "framework/generator.h"
#include "framework/ops/dropout.h"

namespace tapegrad::nn {

namespace {
// SplitMix64's finaliser: a bijection on 64-bit words that spreads nearby inputs far apart.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
}  // namespace

Dropout::Dropout(DropoutOptions options) : Module("Dropout"), options_(options) {
  if (!(options.p >= 0.0 && options.p <= 1.0))
    fail("Dropout: probability has to be between 0 and 1, but got {}", options.p);
  num_masks_drawn = register_buffer("num_masks_drawn", zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
}

// Note: mix is a bijection, so for one seed every call k gets a different generator seed.
Tensor Dropout::forward(const Tensor& input) {
  if (!is_training()) return dropout(input, options_.p, false);
  std::int64_t& calls = *num_masks_drawn.data<std::int64_t>();
  Generator generator(mix(options_.seed ^ mix(static_cast<std::uint64_t>(calls))));
  Tensor output = dropout(input, options_.p, true, generator);
  ++calls;  // only after the op, so a rejected input does not move the stream
  return output;
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", options_.p); }

std::shared_ptr<Module> Dropout::clone() const { return clone_into(std::make_shared<Dropout>(options_)); }

void Dropout::upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const {
  if (from_version >= 2) return;
  const std::string key = prefix + "num_masks_drawn";
  const bool present = std::any_of(state.begin(), state.end(), [&](const auto& entry) { return entry.first == key; });
  if (!present) state.emplace_back(key, zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
}

}  // namespace tapegrad::nn
