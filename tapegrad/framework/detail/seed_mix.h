#pragma once
// Internal: SplitMix64, the mixer behind every derived random stream (Dropout's masks, the samplers' epochs, the
// recurrent and attention layers' dropout streams and stack copies).
#include <cstdint>

namespace tapegrad::detail {

/// SplitMix64's finaliser: a bijection on 64-bit words that spreads nearby inputs far apart, so each count k
/// gives its own generator seed.
constexpr std::uint64_t splitmix64_finalizer(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// One SplitMix64 step: the golden-ratio increment, then the finaliser.
constexpr std::uint64_t splitmix64(std::uint64_t z) { return splitmix64_finalizer(z + 0x9e3779b97f4a7c15ull); }

}  // namespace tapegrad::detail
