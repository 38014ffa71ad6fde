#include <tapegrad/framework/generator.h>

#include <cmath>
#include <numbers>
#include <sstream>

#include <tapegrad/framework/error.h>

namespace tapegrad {

std::string Generator::state() const {
  std::ostringstream out;
  out << seed_ << ' ' << engine_;
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  std::uint64_t seed = 0;
  std::mt19937_64 engine;
  in >> seed >> engine;
  if (in.fail()) fail("Generator::set_state: malformed generator state");
  seed_ = seed;
  engine_ = engine;
}

double Generator::standard_normal() {
  // Note: 1 - u is in (0, 1], so the logarithm is finite.
  const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform01()));
  const double angle = 2.0 * std::numbers::pi * uniform01();
  return radius * std::cos(angle);
}

std::uint64_t Generator::below(std::uint64_t bound) {
  if (bound == 0) fail("Generator::below: bound must be positive");
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t draw = engine_();
  while (draw >= limit) draw = engine_();
  return draw % bound;
}

Generator& default_generator() {
  thread_local Generator generator;
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tapegrad
