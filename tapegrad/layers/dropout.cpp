#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/layers/dropout.h>

#include <algorithm>
#include <bit>
#include <limits>

#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/ops/dropout.h>

namespace tapegrad::nn {

Dropout::Dropout(DropoutOptions options) : Dropout(options, "Dropout") {}

Dropout::Dropout(DropoutOptions options, const char* name) : Module(name), options_(options) {
  if (!(options.p >= 0.0 && options.p <= 1.0))
    fail("{}: probability has to be between 0 and 1, but got {}", name, options.p);
  const std::uint64_t seed = options.seed ? *options.seed : default_generator().next_bits();
  Tensor seed_bits = zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64));
  *seed_bits.data<std::int64_t>() = std::bit_cast<std::int64_t>(seed);
  mask_seed = register_buffer("mask_seed", seed_bits);
  num_masks_drawn = register_buffer("num_masks_drawn", zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
}

std::uint64_t Dropout::seed() const { return std::bit_cast<std::uint64_t>(*mask_seed.data<std::int64_t>()); }

// Note: mix is a bijection, so for one seed every call k gets a different generator seed.
Tensor Dropout::with_next_generator(const std::function<Tensor(Generator&)>& op) {
  std::int64_t& calls = *num_masks_drawn.data<std::int64_t>();
  // Note: the count may come from a file; the largest one cannot be incremented.
  if (calls < 0 || calls == std::numeric_limits<std::int64_t>::max())
    fail("{}: num_masks_drawn is {} (a damaged or foreign state?): it must be in [0, 2^63 - 1)", type_name(), calls);
  Generator generator(tapegrad::detail::splitmix64(seed() ^ tapegrad::detail::splitmix64(static_cast<std::uint64_t>(calls))));
  Tensor output = op(generator);
  ++calls;  // only after the op, so a rejected input does not move the stream
  return output;
}

Tensor Dropout::forward(const Tensor& input) {
  if (!is_training()) return dropout(input, options_.p, false);
  return with_next_generator([&](Generator& generator) { return dropout(input, options_.p, true, generator); });
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", options_.p); }

// Note: the copy is built with this layer's seed, so cloning draws nothing from the default generator.
std::shared_ptr<Module> Dropout::clone() const {
  return clone_into(std::make_shared<Dropout>(DropoutOptions{options_}.with_seed(seed())));
}

void Dropout::upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const {
  auto add_if_absent = [&](const std::string& name, const Tensor& value) {
    const std::string key = prefix + name;
    const bool present = std::any_of(state.begin(), state.end(), [&](const auto& entry) { return entry.first == key; });
    if (!present) state.emplace_back(key, value);
  };
  if (from_version < 2) add_if_absent("num_masks_drawn", zeros(Shape{}, TensorOptions{}.with_dtype(DType::Int64)));
  if (from_version < 3) add_if_absent("mask_seed", mask_seed.clone());
}

Dropout2d::Dropout2d(DropoutOptions options) : Dropout(options, "Dropout2d") {}

Tensor Dropout2d::forward(const Tensor& input) {
  const double p = dropout_options().p;
  if (!is_training()) return dropout2d(input, p, false);
  return with_next_generator([&](Generator& generator) { return dropout2d(input, p, true, generator); });
}

std::shared_ptr<Module> Dropout2d::clone() const {
  return clone_into(std::make_shared<Dropout2d>(DropoutOptions{dropout_options()}.with_seed(seed())));
}

}  // namespace tapegrad::nn
