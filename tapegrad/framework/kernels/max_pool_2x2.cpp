// The 2x2 max pool in short vectors. A row of the usual CNN pools 28 -> 14 or 14 -> 7 columns: shorter than a
// 16-float vector, so an auto-vectorised loop ran almost all of it in its scalar epilogue (7% of cnn training,
// at about half the memory bandwidth, 2026-12-06 profile). Here a row is covered by chunks of 8 (or 4) outputs,
// the last chunk overlapping the one before it instead of leaving a remainder: recomputing a few windows writes
// the same values again.
#include <tapegrad/framework/kernels/max_pool_2x2.h>

#include <cstring>

#include <tapegrad/framework/kernels/detail/max_pool_2x2_rule.h>
#include <tapegrad/framework/kernels/detail/vector_memory.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

// The vector types and constant shuffles of one chunk width: Lanes outputs, read from 2 * Lanes columns.
template <int Lanes>
struct Chunk;

template <>
struct Chunk<8> {
  typedef float Floats __attribute__((vector_size(32)));
  typedef std::int32_t Ints __attribute__((vector_size(32)));
  typedef std::uint8_t Bytes __attribute__((vector_size(8)));
  static constexpr Ints even = {0, 2, 4, 6, 8, 10, 12, 14}, odd = {1, 3, 5, 7, 9, 11, 13, 15};
  static constexpr Ints low_pairs = {0, 8, 1, 9, 2, 10, 3, 11}, high_pairs = {4, 12, 5, 13, 6, 14, 7, 15};
};

template <>
struct Chunk<4> {
  typedef float Floats __attribute__((vector_size(16)));
  typedef std::int32_t Ints __attribute__((vector_size(16)));
  typedef std::uint8_t Bytes __attribute__((vector_size(4)));
  static constexpr Ints even = {0, 2, 4, 6}, odd = {1, 3, 5, 7};
  static constexpr Ints low_pairs = {0, 4, 1, 5}, high_pairs = {2, 6, 3, 7};
};

// Two vectors' lanes picked by a constant mask (lanes of `a` first, then of `b`). Note: GCC's __builtin_shuffle;
// clang (the fuzz build) has no such builtin, and its __builtin_shufflevector wants the lanes as literal
// arguments, so there it is a plain lane loop, correct and slower.
#if defined(__clang__)
// Note: every vector helper here has internal linkage and is inlined into its caller, so the baseline-ABI change
// clang warns about when a 32-byte vector is passed or returned without AVX (-Wpsabi) never reaches a boundary.
#pragma clang diagnostic ignored "-Wpsabi"
template <class V, class I>
inline V shuffle_lanes(const V& a, const V& b, const I& mask) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(a[0]));
  V out;
  for (int k = 0; k < lanes; ++k) out[k] = mask[k] < lanes ? a[mask[k]] : b[mask[k] - lanes];
  return out;
}
#define TAPEGRAD_SHUFFLE(a, b, mask) shuffle_lanes(a, b, mask)
#else
#define TAPEGRAD_SHUFFLE(a, b, mask) __builtin_shuffle(a, b, mask)
#endif

using vectors::load;  // kernels/detail/vector_memory.h
using vectors::store;

// Windows j0 .. j0 + Lanes - 1 of the row pair (top, top + width). Ors the lanes' NaN mask into `nan`.
template <int Lanes>
[[gnu::always_inline]] inline void pool_chunk(const float* top, std::int64_t width, std::int64_t j0, float* out,
                                              std::uint8_t* taps, typename Chunk<Lanes>::Ints& nan) {
  using C = Chunk<Lanes>;
  using F = typename C::Floats;
  using I = typename C::Ints;
  const float* upper_row = top + 2 * j0;
  const float* lower_row = upper_row + width;
  F t0, t1, b0, b1;
  load(t0, upper_row);
  load(t1, upper_row + Lanes);
  load(b0, lower_row);
  load(b1, lower_row + Lanes);
  const F a = TAPEGRAD_SHUFFLE(t0, t1, C::even), b = TAPEGRAD_SHUFFLE(t0, t1, C::odd);
  const F c = TAPEGRAD_SHUFFLE(b0, b1, C::even), d = TAPEGRAD_SHUFFLE(b0, b1, C::odd);
  F value;
  I tap;
  vectors::max_of_window(a, b, c, d, value, tap);
  store(out + j0, value);
  store(taps + j0, __builtin_convertvector(tap, typename C::Bytes));
  nan |= (a != a) | (b != b) | (c != c) | (d != d);
}

// g's windows j0 .. j0 + Lanes - 1 spread over the row pair (top, top + width) of dx.
template <int Lanes>
[[gnu::always_inline]] inline void unpool_chunk(const float* g, const std::uint8_t* taps, std::int64_t width,
                                                std::int64_t j0, float* top) {
  using C = Chunk<Lanes>;
  using F = typename C::Floats;
  using I = typename C::Ints;
  F grad;
  I tap;
  load(grad, g + j0);
  vectors::widen_taps<Lanes>(taps + j0, tap);
  const F zero = {};
  const F a = tap == 0 ? grad : zero, b = tap == 1 ? grad : zero;
  const F c = tap == 2 ? grad : zero, d = tap == 3 ? grad : zero;
  float* upper_row = top + 2 * j0;
  store(upper_row, TAPEGRAD_SHUFFLE(a, b, C::low_pairs));
  store(upper_row + Lanes, TAPEGRAD_SHUFFLE(a, b, C::high_pairs));
  store(upper_row + width, TAPEGRAD_SHUFFLE(c, d, C::low_pairs));
  store(upper_row + width + Lanes, TAPEGRAD_SHUFFLE(c, d, C::high_pairs));
}

// Calls chunk(j0) for chunks of Lanes covering [0, count), the last one overlapping its neighbour; count >= Lanes.
template <int Lanes, class F>
[[gnu::always_inline]] inline void for_chunks(std::int64_t count, F chunk) {
  std::int64_t j0 = 0;
  for (; j0 + Lanes <= count; j0 += Lanes) chunk(j0);
  if (j0 < count) chunk(count - Lanes);
}

template <int Lanes>
[[gnu::always_inline]] inline bool pool_rows(const float* x, std::int64_t width, std::int64_t oh, std::int64_t ow,
                                             float* out, std::uint8_t* taps) {
  typename Chunk<Lanes>::Ints nan = {};
  for (std::int64_t i = 0; i < oh; ++i)
    for_chunks<Lanes>(ow, [&](std::int64_t j0) {
      pool_chunk<Lanes>(x + 2 * i * width, width, j0, out + i * ow, taps + i * ow, nan);
    });
  for (int k = 0; k < Lanes; ++k)
    if (nan[k]) return false;
  return true;
}

template <int Lanes>
[[gnu::always_inline]] inline void unpool_rows(const float* g, const std::uint8_t* taps, std::int64_t width,
                                               std::int64_t oh, std::int64_t ow, float* dx) {
  for (std::int64_t i = 0; i < oh; ++i)
    for_chunks<Lanes>(ow, [&](std::int64_t j0) {
      unpool_chunk<Lanes>(g + i * ow, taps + i * ow, width, j0, dx + 2 * i * width);
    });
}

}  // namespace

TAPEGRAD_DISPATCH
bool max_pool_2x2_plane(const float* x, std::int64_t width, std::int64_t oh, std::int64_t ow, float* out,
                        std::uint8_t* taps) {
  return ow >= 8 ? pool_rows<8>(x, width, oh, ow, out, taps) : pool_rows<4>(x, width, oh, ow, out, taps);
}

TAPEGRAD_DISPATCH
void max_pool_2x2_plane_backward(const float* g, const std::uint8_t* taps, std::int64_t h, std::int64_t width,
                                 std::int64_t oh, std::int64_t ow, float* dx) {
  if (ow >= 8)
    unpool_rows<8>(g, taps, width, oh, ow, dx);
  else
    unpool_rows<4>(g, taps, width, oh, ow, dx);
  // What no window covers: a last column when width is odd (or the pool stops short), a last row likewise.
  if (2 * ow < width)
    for (std::int64_t r = 0; r < 2 * oh; ++r)
      std::memset(dx + r * width + 2 * ow, 0, sizeof(float) * (width - 2 * ow));
  if (2 * oh < h) std::memset(dx + 2 * oh * width, 0, sizeof(float) * ((h - 2 * oh) * width));
}

}  // namespace tapegrad::kernels

#undef TAPEGRAD_SHUFFLE
