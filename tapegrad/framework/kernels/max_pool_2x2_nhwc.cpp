// The disjoint 2x2 max pool over NHWC arrays (max_pool_2x2_nhwc.h). A window's four taps are four rows of C
// contiguous channels, so every loop runs over the channels, unit-stride; one output row of the image is a task.
//
// Note: the general NHWC kernel (pool_nhwc.cpp) saves int64 indices: 8 bytes written by the forward and read by
// the backward per output, against one byte here, and its backward zero-fills dx before scattering into it. The
// 2x2 windows are disjoint, so the backward here writes every input position once, zeros included.
#include <tapegrad/framework/kernels/max_pool_2x2_nhwc.h>

#include <cmath>
#include <cstring>

#include <omp.h>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/detail/max_pool_2x2_rule.h>
#include <tapegrad/framework/kernels/detail/vector_memory.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

// Below this many outputs a parallel region costs more than it saves (as ops/detail/pool_shape.h's 1 << 15 taps).
constexpr std::int64_t kParallelOutputs = std::int64_t{1} << 13;

// The window holding a NaN, channel k: the general loop of ops/max_pool.cpp (first maximum by strict '>' from
// -inf, then every NaN in tap order wins), so the NaN rule is PyTorch's and the same as the NCHW kernels'.
template <class T>
void nan_window(const T* const tap[4], std::int64_t k, T& out, std::uint8_t& which) {
  T best = -INFINITY;
  std::uint8_t at = 0;
  for (std::uint8_t t = 0; t < 4; ++t)
    if (tap[t][k] > best) best = tap[t][k], at = t;
  for (std::uint8_t t = 0; t < 4; ++t)
    if (std::isnan(tap[t][k])) best = tap[t][k], at = t;
  out = best;
  which = at;
}

#if defined(__clang__)
// Note: every vector helper here is inlined into its caller, so the baseline-ABI change clang warns about for
// 64-byte vectors without AVX (-Wpsabi) never reaches a call boundary.
#pragma clang diagnostic ignored "-Wpsabi"
#endif

// A chunk of channels: 64 bytes of T (one AVX-512 register, two AVX2 ones), the comparison masks and the taps.
// Note: GCC vectors, not an `omp simd` loop over the channels: mixing floats with one-byte taps, the vectoriser
// picked 64 lanes (the bytes' width), so C = 32 ran in its masked epilogue, and it loaded g under a mask.
template <class T>
struct Chunk;
template <>
struct Chunk<float> {
  static constexpr std::int64_t lanes = 16;
  typedef float Values __attribute__((vector_size(64)));
  typedef std::int32_t Masks __attribute__((vector_size(64)));
  typedef std::uint8_t Taps __attribute__((vector_size(16)));
};
template <>
struct Chunk<double> {
  static constexpr std::int64_t lanes = 8;
  typedef double Values __attribute__((vector_size(64)));
  typedef std::int64_t Masks __attribute__((vector_size(64)));
  typedef std::uint8_t Taps __attribute__((vector_size(8)));
};

using vectors::load;  // kernels/detail/vector_memory.h
using vectors::store;

// chunk(k0) for chunks of `lanes` channels covering [0, c), the last one overlapping its neighbour instead of
// leaving a remainder (recomputing a few channels writes the same values again); scalar(k) for each channel when
// c < lanes.
template <class Vector, class Scalar>
[[gnu::always_inline]] inline void over_channels(std::int64_t c, std::int64_t lanes, Vector chunk, Scalar scalar) {
  if (c < lanes) {
    for (std::int64_t k = 0; k < c; ++k) scalar(k);
    return;
  }
  std::int64_t k0 = 0;
  for (; k0 + lanes <= c; k0 += lanes) chunk(k0);
  if (k0 < c) chunk(c - lanes);
}

// Output row i of image n.
template <class T>
[[gnu::always_inline]] inline void pool_row(const T* x, const Nhwc2x2& p, std::int64_t row, T* out,
                                            std::uint8_t* taps) {
  using C = Chunk<T>;
  using V = typename C::Values;
  using M = typename C::Masks;
  const std::int64_t n = row / p.oh, i = row % p.oh, c = p.c;
  const T* top = x + ((n * p.h + 2 * i) * p.w) * c;
  V probe = {};  // NaN in the lanes where some window of the row may hold a NaN
  int scalar_nan = 0;
  for (std::int64_t j = 0; j < p.ow; ++j) {
    const T* const tap[4] = {top + 2 * j * c, top + (2 * j + 1) * c, top + (p.w + 2 * j) * c,
                             top + (p.w + 2 * j + 1) * c};
    T* o = out + (row * p.ow + j) * c;
    std::uint8_t* t = taps + (row * p.ow + j) * c;
    // Note: the NCHW kernel's selection rule (kernels/detail/max_pool_2x2_rule.h), so both give the same taps.
    over_channels(
        c, C::lanes,
        [&](std::int64_t k) {
          V a, b, cc, d;
          load(a, tap[0] + k);
          load(b, tap[1] + k);
          load(cc, tap[2] + k);
          load(d, tap[3] + k);
          V value;
          M which;
          vectors::max_of_window(a, b, cc, d, value, which);
          store(o + k, value);
          store(t + k, __builtin_convertvector(which, typename C::Taps));
          // Note: x - x is 0 for a finite x, NaN for a NaN (or an infinity: then the row is checked for nothing).
          // Not a != a, which GCC 12 compiled to one scalar compare per lane for these 64-byte vectors.
          probe += (a - a) + (b - b) + (cc - cc) + (d - d);
        },
        [&](std::int64_t k) {
          const T a = tap[0][k], b = tap[1][k], cc = tap[2][k], d = tap[3][k];
          scalar_nan |= (a != a) | (b != b) | (cc != cc) | (d != d);
          const int take_b = b > a, take_d = d > cc;
          const T upper = take_b ? b : a, lower = take_d ? d : cc;
          const int take_lower = lower > upper;
          o[k] = take_lower ? lower : upper;
          t[k] = static_cast<std::uint8_t>(take_b + take_lower * (2 + take_d - take_b));
        });
  }
  for (std::int64_t l = 0; l < C::lanes; ++l) scalar_nan |= std::isnan(probe[l]);
  if (!scalar_nan) return;
  // The rare row holding a NaN: its windows with one take PyTorch's rule, channel by channel.
  for (std::int64_t j = 0; j < p.ow; ++j) {
    const T* const tap[4] = {top + 2 * j * c, top + (2 * j + 1) * c, top + (p.w + 2 * j) * c,
                             top + (p.w + 2 * j + 1) * c};
    for (std::int64_t k = 0; k < c; ++k)
      if (std::isnan(tap[0][k]) || std::isnan(tap[1][k]) || std::isnan(tap[2][k]) || std::isnan(tap[3][k]))
        nan_window(tap, k, out[(row * p.ow + j) * c + k], taps[(row * p.ow + j) * c + k]);
  }
}

// Input rows 2i and 2i + 1 of image n (and the rows after them when they are the last, uncovered ones).
template <class T>
[[gnu::always_inline]] inline void unpool_row(const T* g, const std::uint8_t* taps, const Nhwc2x2& p,
                                              std::int64_t row, T* dx) {
  using C = Chunk<T>;
  using V = typename C::Values;
  using M = typename C::Masks;
  const std::int64_t n = row / p.oh, i = row % p.oh, c = p.c;
  T* top = dx + ((n * p.h + 2 * i) * p.w) * c;
  for (std::int64_t j = 0; j < p.ow; ++j) {
    const T* gv = g + (row * p.ow + j) * c;
    const std::uint8_t* t = taps + (row * p.ow + j) * c;
    T* a = top + 2 * j * c;
    T* b = a + c;
    T* cc = top + (p.w + 2 * j) * c;
    T* d = cc + c;
    over_channels(
        c, C::lanes,
        [&](std::int64_t k) {
          V grad;
          M which;
          load(grad, gv + k);
          vectors::widen_taps<Chunk<T>::lanes>(t + k, which);
          const V zero = {};
          store(a + k, which == 0 ? grad : zero);
          store(b + k, which == 1 ? grad : zero);
          store(cc + k, which == 2 ? grad : zero);
          store(d + k, which == 3 ? grad : zero);
        },
        [&](std::int64_t k) {
          const T grad = gv[k];
          const int which = t[k];
          a[k] = which == 0 ? grad : T(0);
          b[k] = which == 1 ? grad : T(0);
          cc[k] = which == 2 ? grad : T(0);
          d[k] = which == 3 ? grad : T(0);
        });
  }
  const std::size_t tail = static_cast<std::size_t>((p.w - 2 * p.ow) * c) * sizeof(T);
  if (tail) {
    std::memset(top + 2 * p.ow * c, 0, tail);
    std::memset(top + (p.w + 2 * p.ow) * c, 0, tail);
  }
  if (i + 1 == p.oh && 2 * p.oh < p.h)
    std::memset(top + 2 * p.w * c, 0, static_cast<std::size_t>((p.h - 2 * p.oh) * p.w * c) * sizeof(T));
}

// Rows [first, last) of the output, one call per thread's share (the clones below are per row range: an OpenMP
// region inside a TAPEGRAD_DISPATCH function would outline its body into a function of the baseline target).
template <class T>
[[gnu::always_inline]] inline void pool_rows(const T* x, const Nhwc2x2& p, std::int64_t first, std::int64_t last,
                                             T* out, std::uint8_t* taps) {
  for (std::int64_t row = first; row < last; ++row) pool_row(x, p, row, out, taps);
}
template <class T>
[[gnu::always_inline]] inline void unpool_rows(const T* g, const std::uint8_t* taps, const Nhwc2x2& p,
                                               std::int64_t first, std::int64_t last, T* dx) {
  for (std::int64_t row = first; row < last; ++row) unpool_row(g, taps, p, row, dx);
}

TAPEGRAD_DISPATCH void pool_rows_of(const float* x, const Nhwc2x2& p, std::int64_t first, std::int64_t last,
                                    float* out, std::uint8_t* taps) {
  pool_rows(x, p, first, last, out, taps);
}
TAPEGRAD_DISPATCH void pool_rows_of(const double* x, const Nhwc2x2& p, std::int64_t first, std::int64_t last,
                                    double* out, std::uint8_t* taps) {
  pool_rows(x, p, first, last, out, taps);
}
TAPEGRAD_DISPATCH void unpool_rows_of(const float* g, const std::uint8_t* taps, const Nhwc2x2& p, std::int64_t first,
                                      std::int64_t last, float* dx) {
  unpool_rows(g, taps, p, first, last, dx);
}
TAPEGRAD_DISPATCH void unpool_rows_of(const double* g, const std::uint8_t* taps, const Nhwc2x2& p,
                                      std::int64_t first, std::int64_t last, double* dx) {
  unpool_rows(g, taps, p, first, last, dx);
}

// body(first, last) over the output rows, split in contiguous shares over the threads when worth it.
template <class Body>
void over_rows(const Nhwc2x2& p, Body body) {
  const std::int64_t rows = p.n * p.oh;
  if (!detail::use_threads(rows * p.ow * p.c, kParallelOutputs)) return body(0, rows);
#pragma omp parallel
  {
    const std::int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    body(rows * t / count, rows * (t + 1) / count);
  }
}

}  // namespace

void max_pool_2x2_nhwc(const float* x, const Nhwc2x2& p, float* out, std::uint8_t* taps) {
  over_rows(p, [&](std::int64_t first, std::int64_t last) { pool_rows_of(x, p, first, last, out, taps); });
}
void max_pool_2x2_nhwc(const double* x, const Nhwc2x2& p, double* out, std::uint8_t* taps) {
  over_rows(p, [&](std::int64_t first, std::int64_t last) { pool_rows_of(x, p, first, last, out, taps); });
}

// Note: an image with oh == 0 has no output rows to visit, and all its input rows are uncovered.
void max_pool_2x2_nhwc_backward(const float* g, const std::uint8_t* taps, const Nhwc2x2& p, float* dx) {
  if (p.oh == 0) return void(std::memset(dx, 0, static_cast<std::size_t>(p.n * p.h * p.w * p.c) * sizeof(float)));
  over_rows(p, [&](std::int64_t first, std::int64_t last) { unpool_rows_of(g, taps, p, first, last, dx); });
}
void max_pool_2x2_nhwc_backward(const double* g, const std::uint8_t* taps, const Nhwc2x2& p, double* dx) {
  if (p.oh == 0) return void(std::memset(dx, 0, static_cast<std::size_t>(p.n * p.h * p.w * p.c) * sizeof(double)));
  over_rows(p, [&](std::int64_t first, std::int64_t last) { unpool_rows_of(g, taps, p, first, last, dx); });
}

}  // namespace tapegrad::kernels
