#pragma once
/// Seedable random number generators; every random factory and layer initialiser takes one.
#include <cstdint>
#include <random>
#include <string>

namespace tapegrad {

/// A 64-bit Mersenne Twister with a recorded seed. Its full state can be saved and restored as text,
/// so a checkpoint resumes the exact random stream.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 5489u) : engine_(seed), seed_(seed) {}
  void manual_seed(std::uint64_t seed) { engine_.seed(seed); seed_ = seed; }
  std::uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }
  /// Uniform in [0, 1).
  double uniform01() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  /// The engine's state, as the standard library prints it.
  std::string state() const;
  /// Restores a state produced by state(); throws tapegrad::Error on malformed text.
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
  std::uint64_t seed_;
};

/// The calling thread's default generator (thread-local, like the tape), used when none is given.
Generator& default_generator();
/// Seeds the calling thread's default generator.
void manual_seed(std::uint64_t seed);

}  // namespace tapegrad
