#pragma once
/// Seedable random number generators; every random factory and layer initialiser takes one.
#include <tapegrad/export.h>
#include <cstdint>
#include <random>
#include <string>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// A 64-bit Mersenne Twister with a recorded seed. Its full state can be saved and restored as text,
/// so a checkpoint resumes the exact random stream.
/// Note: the distributions are tapegrad's own, not <random>'s, whose algorithms are implementation-defined
/// (libstdc++ and libc++ give other numbers for the same seed). The engine's sequence is fixed by the
/// standard, and so these values are the same on every platform, up to the C library's log, sqrt and cos
/// in standard_normal.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 5489u) : engine_(seed), seed_(seed) {}
  void manual_seed(std::uint64_t seed) { engine_.seed(seed); seed_ = seed; }
  std::uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }
  /// The next 64 raw bits of the stream.
  std::uint64_t next_bits() { return engine_(); }
  /// Uniform in [0, 1): the top 53 bits of one draw times 2^-53 (every double k / 2^53 equally likely).
  double uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in [0, 1) for float32: the top 24 bits of one draw times 2^-24, so it never rounds up to 1.
  float uniform01_float() { return static_cast<float>(engine_() >> 40) * 0x1.0p-24f; }
  /// Standard normal by the Box-Muller transform: two draws per value, the sine half discarded so that no
  /// value is held back between calls (the stream's position is all the state there is).
  double standard_normal();
  /// Uniform integer in [0, bound), unbiased (rejection of the top of the 64-bit range); bound > 0.
  std::uint64_t below(std::uint64_t bound);
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

TAPEGRAD_API_END
