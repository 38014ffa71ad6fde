// The disjoint 2x2 max pool's selection rule over vectors of windows, shared by the NCHW kernel
// (kernels/max_pool_2x2.cpp) and the NHWC one (kernels/max_pool_2x2_nhwc.cpp) so their values and taps stay
// bit-identical: the same selections as the scalar loop in ops/max_pool.cpp, the first maximum of each pair (a, b
// the upper row, c, d the lower), then the lower pair only if strictly greater. Without NaNs that is the first
// maximum in tap order; the callers check for NaNs themselves.
#pragma once

#include <cstdint>
#include <cstring>

namespace tapegrad::kernels::vectors {

/// Per lane, value = the window's maximum by the rule above and tap = its position (0 a, 1 b, 2 c, 3 d).
/// V is a GCC vector of floating values, M the vector of same-width integers its comparisons give (-1 or 0).
template <class V, class M>
[[gnu::always_inline]] inline void max_of_window(const V& a, const V& b, const V& c, const V& d, V& value, M& tap) {
  const M take_b = b > a, take_d = d > c;
  const V upper = take_b ? b : a, lower = take_d ? d : c;
  const M take_lower = lower > upper;
  value = take_lower ? lower : upper;
  tap = take_lower ? 2 - take_d : -take_b;
}

/// which[l] = taps[l] for the Lanes (a multiple of 4) one-byte taps saved by the forward, one integer lane each.
/// Note: by shifts of the 32-bit words holding four taps each: __builtin_convertvector from a vector of bytes
/// compiled to one byte extract and insert per lane in GCC 12 (objdump: 30 movzbl/pinsrd in the NCHW backward).
template <int Lanes, class M>
[[gnu::always_inline]] inline void widen_taps(const std::uint8_t* taps, M& which) {
  static_assert(Lanes % 4 == 0, "widen_taps: whole 32-bit words of taps");
  std::uint32_t w[Lanes / 4];
  std::memcpy(w, taps, sizeof w);
  M words, shifts;
  for (int l = 0; l < Lanes; ++l) {
    words[l] = w[l / 4];
    shifts[l] = 8 * (l % 4);
  }
  which = (words >> shifts) & 0xff;
}

}  // namespace tapegrad::kernels::vectors
