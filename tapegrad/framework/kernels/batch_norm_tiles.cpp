// BatchNorm's tile loops (batch_norm_tiles.h): a chunk of channels at a time, its accumulators and coefficients
// in registers across all the tile's rows. The chunks are GCC vectors of 8 lanes (one AVX-512 register of
// doubles, two AVX2 ones, four SSE ones), inlined into each dispatched clone.
//
// Note: this file is compiled with -ffp-contract=off (cmake/library.cmake), like batch_norm_runs.cpp: the
// affine map and ReLU's recomputed input round every operation once, so the fused BatchNorm+ReLU backward
// sees the forward's bits in every clone.
#include <tapegrad/framework/kernels/batch_norm_tiles.h>

#include <cstring>
#include <type_traits>

#include <tapegrad/framework/kernels/detail/vector_memory.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

#if defined(__clang__)
// Note: every vector helper here is inlined into its caller, so the baseline-ABI change clang warns about for
// 32/64-byte vectors without AVX (-Wpsabi) never reaches a call boundary.
#pragma clang diagnostic ignored "-Wpsabi"
#endif

constexpr std::int64_t kLanes = 8;

template <class T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(64)));
};
typedef double Wide __attribute__((vector_size(64)));

using vectors::load;  // kernels/detail/vector_memory.h
using vectors::store;
template <class V>
[[gnu::always_inline]] inline void widen(Wide& w, const V& v) {
  w = __builtin_convertvector(v, Wide);
}

// Whether chunks of 32 channels fit the registers: AVX-512's 32 (a chunk's accumulators and coefficients take up
// to 24 vectors of 8 doubles or floats; AVX2's 16 registers would spill them). Asked at run time, once per tile:
// the macros say nothing about the clone being compiled.
[[gnu::always_inline]] inline bool wide_registers() { return __builtin_cpu_supports("avx512f"); }

// vector(K, c) for chunks of K * 8 channels (K = 4 with AVX-512, then K = 2, then one K = 1), scalar(c) for the
// last width % 8.
// Note: K = 4 covers a row of 32 float channels (cnn_cl's and resnet_cl's first stages) in one walk over the
// tile's rows instead of two: the training forward + backward on [64, 32, 28, 28] took 1.36 ms instead of 1.79
// (NCHW 1.2-1.5 ms; bench/batch_norm_rows, 1 thread, load ~11).
template <class Vector, class Scalar>
[[gnu::always_inline]] inline void over_chunks(std::int64_t width, Vector vector, Scalar scalar) {
  std::int64_t c = 0;
  if (wide_registers())
    for (; c + 4 * kLanes <= width; c += 4 * kLanes) vector(std::integral_constant<int, 4>{}, c);
  for (; c + 2 * kLanes <= width; c += 2 * kLanes) vector(std::integral_constant<int, 2>{}, c);
  if (c + kLanes <= width) {
    vector(std::integral_constant<int, 1>{}, c);
    c += kLanes;
  }
  for (; c < width; ++c) scalar(c);
}

// v[k] = the 8 lanes at p + k * 8, for a chunk's K vectors of per-channel coefficients.
template <int K, class V, class E>
[[gnu::always_inline]] inline void load_chunk(V (&v)[K], const E* p) {
  for (int k = 0; k < K; ++k) load(v[k], p + k * kLanes);
}

// sums[k * 8 ..] += acc[k] for a chunk's K vectors of register sums (the end of a tile's walk).
template <int K>
[[gnu::always_inline]] inline void add_chunk_sums(double* sums, const Wide (&acc)[K]) {
  for (int k = 0; k < K; ++k) {
    Wide t;
    load(t, sums + k * kLanes);
    store(sums + k * kLanes, t + acc[k]);
  }
}

// ReLU's rules, as batch_norm_runs.cpp's maybe_relu and relu_gradient: v <= 0 gives 0, a NaN stays.
template <class V>
[[gnu::always_inline]] inline void relu_in_place(V& v) {
  const V zero = {};
  v = v <= zero ? zero : v;
}
template <class V>
[[gnu::always_inline]] inline void mask_in_place(V& g, const V& x, const V& shift, const V& scale, const V& offset) {
  const V zero = {};
  g = (x - shift) * scale + offset <= zero ? zero : g;
}
template <class T>
[[gnu::always_inline]] inline T masked(T g, T x, T shift, T scale, T offset) {
  return (x - shift) * scale + offset <= T(0) ? T(0) : g;
}

template <class T>
[[gnu::always_inline]] inline void moments_body(const T* x, std::int64_t rows, std::int64_t width,
                                                const double* shift, double* sum, double* squares) {
  using V = typename Vec<T>::type;
  over_chunks(
      width,
      [&](auto k_chunks, std::int64_t c0) {
        constexpr int K = decltype(k_chunks)::value;
        Wide s[K], a[K] = {}, q[K] = {};
        load_chunk(s, shift + c0);
        for (std::int64_t r = 0; r < rows; ++r)
          for (int k = 0; k < K; ++k) {
            V v;
            Wide d;
            load(v, x + r * width + c0 + k * kLanes);
            widen(d, v);
            d -= s[k];
            a[k] += d;
            q[k] += d * d;
          }
        add_chunk_sums(sum + c0, a);
        add_chunk_sums(squares + c0, q);
      },
      [&](std::int64_t c) {
        double a = 0, q = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          const double d = static_cast<double>(x[r * width + c]) - shift[c];
          a += d;
          q += d * d;
        }
        sum[c] += a;
        squares[c] += q;
      });
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void affine_body(const T* p, T* q, std::int64_t rows, std::int64_t width, const T* shift,
                                               const T* scale, const T* offset) {
  using V = typename Vec<T>::type;
  over_chunks(
      width,
      [&](auto k_chunks, std::int64_t c0) {
        constexpr int K = decltype(k_chunks)::value;
        V s[K], m[K], o[K];
        load_chunk(s, shift + c0);
        load_chunk(m, scale + c0);
        load_chunk(o, offset + c0);
        for (std::int64_t r = 0; r < rows; ++r)
          for (int k = 0; k < K; ++k) {
            V v;
            load(v, p + r * width + c0 + k * kLanes);
            v = (v - s[k]) * m[k] + o[k];
            if constexpr (Relu) relu_in_place(v);
            store(q + r * width + c0 + k * kLanes, v);
          }
      },
      [&](std::int64_t c) {
        for (std::int64_t r = 0; r < rows; ++r) {
          const T v = (p[r * width + c] - shift[c]) * scale[c] + offset[c];
          q[r * width + c] = Relu && v <= T(0) ? T(0) : v;
        }
      });
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_sums_body(const T* g, const T* x, std::int64_t rows, std::int64_t width,
                                                  const double* mean, const TileMask<T>& mask, double* sum_g,
                                                  double* sum_gxc) {
  using V = typename Vec<T>::type;
  over_chunks(
      width,
      [&](auto k_chunks, std::int64_t c0) {
        constexpr int K = decltype(k_chunks)::value;
        Wide mu[K], a[K] = {}, b[K] = {};
        V ms[K], mm[K], mo[K];
        load_chunk(mu, mean + c0);
        if constexpr (Relu) {
          load_chunk(ms, mask.shift + c0);
          load_chunk(mm, mask.scale + c0);
          load_chunk(mo, mask.offset + c0);
        }
        for (std::int64_t r = 0; r < rows; ++r)
          for (int k = 0; k < K; ++k) {
            V gv, xv;
            load(gv, g + r * width + c0 + k * kLanes);
            load(xv, x + r * width + c0 + k * kLanes);
            if constexpr (Relu) mask_in_place(gv, xv, ms[k], mm[k], mo[k]);
            Wide gw, xw;
            widen(gw, gv);
            widen(xw, xv);
            a[k] += gw;
            b[k] += gw * (xw - mu[k]);
          }
        add_chunk_sums(sum_g + c0, a);
        add_chunk_sums(sum_gxc + c0, b);
      },
      [&](std::int64_t c) {
        double a = 0, b = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          T gv = g[r * width + c];
          const T xv = x[r * width + c];
          if constexpr (Relu) gv = masked(gv, xv, mask.shift[c], mask.scale[c], mask.offset[c]);
          a += static_cast<double>(gv);
          b += static_cast<double>(gv) * (static_cast<double>(xv) - mean[c]);
        }
        sum_g[c] += a;
        sum_gxc[c] += b;
      });
}

template <bool Relu, class T>
[[gnu::always_inline]] inline void grad_input_body(const T* g, const T* x, T* dx, std::int64_t rows,
                                                   std::int64_t width, const T* mean, const T* a, const T* b,
                                                   const T* d, const TileMask<T>& mask) {
  using V = typename Vec<T>::type;
  over_chunks(
      width,
      [&](auto k_chunks, std::int64_t c0) {
        constexpr int K = decltype(k_chunks)::value;
        V mu[K], va[K], vb[K], vd[K], mm[K], mo[K];
        load_chunk(mu, mean + c0);
        load_chunk(va, a + c0);
        load_chunk(vb, b + c0);
        load_chunk(vd, d + c0);
        if constexpr (Relu) {
          load_chunk(mm, mask.scale + c0);
          load_chunk(mo, mask.offset + c0);
        }
        for (std::int64_t r = 0; r < rows; ++r)
          for (int k = 0; k < K; ++k) {
            V gv, xv;
            load(gv, g + r * width + c0 + k * kLanes);
            load(xv, x + r * width + c0 + k * kLanes);
            if constexpr (Relu) mask_in_place(gv, xv, mu[k], mm[k], mo[k]);
            store(dx + r * width + c0 + k * kLanes, va[k] * gv + vb[k] * (xv - mu[k]) + vd[k]);
          }
      },
      [&](std::int64_t c) {
        for (std::int64_t r = 0; r < rows; ++r) {
          T gv = g[r * width + c];
          const T xv = x[r * width + c];
          if constexpr (Relu) gv = masked(gv, xv, mean[c], mask.scale[c], mask.offset[c]);
          dx[r * width + c] = a[c] * gv + b[c] * (xv - mean[c]) + d[c];
        }
      });
}

}  // namespace

// One dispatched definition per element type; the macro keeps the two copies from drifting apart.
#define TAPEGRAD_BATCH_NORM_TILES(T)                                                                              \
  TAPEGRAD_DISPATCH void tile_moments(const T* x, std::int64_t rows, std::int64_t width, const double* shift,     \
                                      double* sum, double* squares) {                                             \
    moments_body(x, rows, width, shift, sum, squares);                                                            \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void tile_affine(const T* p, T* q, std::int64_t rows, std::int64_t width, const T* shift,      \
                                     const T* scale, const T* offset, bool relu) {                                \
    if (relu)                                                                                                     \
      affine_body<true>(p, q, rows, width, shift, scale, offset);                                                 \
    else                                                                                                          \
      affine_body<false>(p, q, rows, width, shift, scale, offset);                                                \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void tile_grad_sums(const T* g, const T* x, std::int64_t rows, std::int64_t width,             \
                                        const double* mean, const TileMask<T>& mask, double* sum_g,                \
                                        double* sum_gxc) {                                                        \
    if (mask.scale)                                                                                               \
      grad_sums_body<true>(g, x, rows, width, mean, mask, sum_g, sum_gxc);                                        \
    else                                                                                                          \
      grad_sums_body<false>(g, x, rows, width, mean, mask, sum_g, sum_gxc);                                       \
  }                                                                                                               \
  TAPEGRAD_DISPATCH void tile_grad_input(const T* g, const T* x, T* dx, std::int64_t rows, std::int64_t width,     \
                                         const T* mean, const T* a, const T* b, const T* d,                       \
                                         const TileMask<T>& mask) {                                               \
    if (mask.scale)                                                                                               \
      grad_input_body<true>(g, x, dx, rows, width, mean, a, b, d, mask);                                          \
    else                                                                                                          \
      grad_input_body<false>(g, x, dx, rows, width, mean, a, b, d, mask);                                         \
  }

TAPEGRAD_BATCH_NORM_TILES(float)
TAPEGRAD_BATCH_NORM_TILES(double)

#undef TAPEGRAD_BATCH_NORM_TILES

}  // namespace tapegrad::kernels
