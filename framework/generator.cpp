#include "framework/generator.h"

#include <sstream>

#include "framework/error.h"

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

Generator& default_generator() {
  thread_local Generator generator;
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tapegrad
