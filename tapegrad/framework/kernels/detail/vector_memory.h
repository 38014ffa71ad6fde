// Loads and stores of GCC vector types (`T __attribute__((vector_size(N)))`) at any alignment, for the kernels
// that use them: the 2x2 max pools and BatchNorm's row tiles.
// Note: vectors go through references, never return values or by-value parameters: the baseline clone has no
// AVX registers, and GCC warns that a 32/64-byte vector crossing a call there has another ABI (-Wpsabi), even in
// an inlined helper. memcpy compiles to one unaligned load or store.
#pragma once

#include <cstring>

#if defined(__clang__)
// Note: these are inlined into their callers (whose files ignore the same warning), so the baseline-ABI change
// clang warns about never reaches a call boundary.
#pragma clang diagnostic ignored "-Wpsabi"
#endif

namespace tapegrad::kernels::vectors {

template <class V, class E>
[[gnu::always_inline]] inline void load(V& v, const E* p) {
  std::memcpy(&v, p, sizeof v);
}

template <class V, class E>
[[gnu::always_inline]] inline void store(E* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace tapegrad::kernels::vectors
