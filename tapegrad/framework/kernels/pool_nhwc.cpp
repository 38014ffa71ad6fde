// Pooling over dense NHWC arrays (see pool_nhwc.h): the channel loop is innermost and unit-stride.
#include <tapegrad/framework/kernels/pool_nhwc.h>

#include <algorithm>
#include <limits>
#include <vector>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {
// Below this many inner-loop steps a parallel region costs more than it saves (as ops/detail/pool_shape.h).
constexpr std::int64_t kParallelWork = std::int64_t{1} << 15;

// Note: each loop body below is a template inlined into TAPEGRAD_DISPATCH clones (AVX-512, AVX2, baseline) for
// float and double, since the default build targets SSE4.2 (kernels/dispatch.h); the CLONES macro makes them.
#define TAPEGRAD_NHWC_CLONES(body, params, args)                             \
  TAPEGRAD_DISPATCH void body##_f32 params(float) { body<float> args; }      \
  TAPEGRAD_DISPATCH void body##_f64 params(double) { body<double> args; }    \
  [[maybe_unused]] void body##_any params(float) { body##_f32 args; }        \
  [[maybe_unused]] void body##_any params(double) { body##_f64 args; }

template <class T>
[[gnu::always_inline]] inline void max_row(const T* x, const NhwcPlanes& p, const NhwcMaxWindows& win, T* out,
                                           std::int64_t* indices, std::int64_t row) {
  const std::int64_t c = p.c;
  {
    const std::int64_t n = row / p.oh, i = row % p.oh;
    const T* image = x + n * p.h * p.w * c;
    for (std::int64_t j = 0; j < p.ow; ++j) {
      T* best = out + ((n * p.oh + i) * p.ow + j) * c;
      std::int64_t* best_index = indices + ((n * p.oh + i) * p.ow + j) * c;
      const std::int64_t h0 = i * win.stride_h - win.pad_h, w0 = j * win.stride_w - win.pad_w;
      const std::int64_t first =
          (h0 + win.row_first[i] * win.dilation_h) * p.w + w0 + win.col_first[j] * win.dilation_w;
      for (std::int64_t k = 0; k < c; ++k) {
        best[k] = -std::numeric_limits<T>::infinity();
        best_index[k] = first;
      }
      for (std::int64_t ki = win.row_first[i]; ki < win.row_last[i]; ++ki)
        for (std::int64_t kj = win.col_first[j]; kj < win.col_last[j]; ++kj) {
          const std::int64_t at = (h0 + ki * win.dilation_h) * p.w + w0 + kj * win.dilation_w;
          const T* v = image + at * c;
          // Note: strict '>' keeps the first maximum; a NaN always takes over, so the last NaN wins and no number
          // replaces it (PyTorch's rule), without a second pass.
#pragma omp simd
          for (std::int64_t k = 0; k < c; ++k) {
            const bool take = (v[k] > best[k]) | (v[k] != v[k]);
            best[k] = take ? v[k] : best[k];
            best_index[k] = take ? at : best_index[k];
          }
        }
    }
  }
}
#define TAPEGRAD_MAX_ROW_PARAMS(T) \
  (const T* x, const NhwcPlanes& p, const NhwcMaxWindows& win, T* out, std::int64_t* indices, std::int64_t row)
TAPEGRAD_NHWC_CLONES(max_row, TAPEGRAD_MAX_ROW_PARAMS, (x, p, win, out, indices, row))

template <class T>
[[gnu::always_inline]] inline void max_image_backward(const T* g, const std::int64_t* indices, const NhwcPlanes& p,
                                                      T* dx, std::int64_t n) {
  const std::int64_t c = p.c, in_image = p.h * p.w * c, out_image = p.oh * p.ow * c;
  T* d = dx + n * in_image;
  std::fill(d, d + in_image, T(0));
  const T* gi = g + n * out_image;
  const std::int64_t* index = indices + n * out_image;
  for (std::int64_t o = 0; o < p.oh * p.ow; ++o)
    for (std::int64_t k = 0; k < c; ++k) d[index[o * c + k] * c + k] += gi[o * c + k];
}
#define TAPEGRAD_MAX_BACKWARD_PARAMS(T) \
  (const T* g, const std::int64_t* indices, const NhwcPlanes& p, T* dx, std::int64_t n)
TAPEGRAD_NHWC_CLONES(max_image_backward, TAPEGRAD_MAX_BACKWARD_PARAMS, (g, indices, p, dx, n))

}  // namespace

template <class T>
void max_pool_nhwc(const T* x, const NhwcPlanes& p, const NhwcMaxWindows& win, T* out, std::int64_t* indices) {
  const bool threaded = detail::use_threads(p.n * p.oh * p.ow * p.c * 4, kParallelWork);
  detail::parallel_for(p.n * p.oh, threaded, [&](std::int64_t row) { max_row_any(x, p, win, out, indices, row); });
}

template <class T>
void max_pool_nhwc_backward(const T* g, const std::int64_t* indices, const NhwcPlanes& p, T* dx) {
  // Note: one image per thread: windows of one image may share a maximum, so its additions must not race.
  detail::parallel_for(p.n, detail::use_threads(p.n * p.h * p.w * p.c, kParallelWork),
                       [&](std::int64_t n) { max_image_backward_any(g, indices, p, dx, n); });
}

template <class T>
void max_pool_nhwc_gather(const T* x, const std::int64_t* indices, const NhwcPlanes& p, T* out) {
  const std::int64_t c = p.c, in_image = p.h * p.w * c, out_image = p.oh * p.ow * c;
  detail::parallel_for(p.n, detail::use_threads(p.n * out_image, kParallelWork), [&](std::int64_t n) {
    const T* xi = x + n * in_image;
    for (std::int64_t o = 0; o < out_image; ++o) out[n * out_image + o] = xi[indices[n * out_image + o] * c + o % c];
  });
}

namespace {
template <class T>
[[gnu::always_inline]] inline void avg_row(const T* x, const NhwcPlanes& p, const NhwcAxisWindows& rows,
                                           const NhwcAxisWindows& cols, T* out, std::int64_t row) {
  const std::int64_t c = p.c;
  {
    const std::int64_t n = row / p.oh, i = row % p.oh;
    const T* image = x + n * p.h * p.w * c;
    for (std::int64_t j = 0; j < p.ow; ++j) {
      T* total = out + ((n * p.oh + i) * p.ow + j) * c;
      std::fill(total, total + c, T(0));
      const std::int64_t rs = rows.start[i], re = rows.end[i], cs = cols.start[j], ce = cols.end[j];
      for (std::int64_t h = rs; h < re; ++h)
        for (std::int64_t w = cs; w < ce; ++w) {
          const T* v = image + (h * p.w + w) * c;
#pragma omp simd
          for (std::int64_t k = 0; k < c; ++k) total[k] += v[k];
        }
      const T divisor = static_cast<T>(rows.divisor[i] * cols.divisor[j]);
      const bool empty_window = rs >= re || cs >= ce;
      for (std::int64_t k = 0; k < c; ++k) total[k] = empty_window ? T(0) : total[k] / divisor;
    }
  }
}
#define TAPEGRAD_AVG_ROW_PARAMS(T) \
  (const T* x, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols, T* out, std::int64_t row)
TAPEGRAD_NHWC_CLONES(avg_row, TAPEGRAD_AVG_ROW_PARAMS, (x, p, rows, cols, out, row))

template <class T>
[[gnu::always_inline]] inline void avg_image_backward(const T* g, const NhwcPlanes& p, const NhwcAxisWindows& rows,
                                                      const NhwcAxisWindows& cols, T* dx, std::int64_t n) {
  const std::int64_t c = p.c, in_image = p.h * p.w * c;
  {
    T* d = dx + n * in_image;
    std::fill(d, d + in_image, T(0));
    std::vector<T> share(static_cast<std::size_t>(c));
    for (std::int64_t i = 0; i < p.oh; ++i)
      for (std::int64_t j = 0; j < p.ow; ++j) {
        const std::int64_t rs = rows.start[i], re = rows.end[i], cs = cols.start[j], ce = cols.end[j];
        if (rs >= re || cs >= ce) continue;
        const T divisor = static_cast<T>(rows.divisor[i] * cols.divisor[j]);
        const T* gi = g + ((n * p.oh + i) * p.ow + j) * c;
        for (std::int64_t k = 0; k < c; ++k) share[static_cast<std::size_t>(k)] = gi[k] / divisor;
        for (std::int64_t h = rs; h < re; ++h)
          for (std::int64_t w = cs; w < ce; ++w) {
            T* dv = d + (h * p.w + w) * c;
#pragma omp simd
            for (std::int64_t k = 0; k < c; ++k) dv[k] += share[static_cast<std::size_t>(k)];
          }
      }
  }
}
#define TAPEGRAD_AVG_BACKWARD_PARAMS(T) \
  (const T* g, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols, T* dx, std::int64_t n)
TAPEGRAD_NHWC_CLONES(avg_image_backward, TAPEGRAD_AVG_BACKWARD_PARAMS, (g, p, rows, cols, dx, n))
}  // namespace

template <class T>
void avg_pool_nhwc(const T* x, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols, T* out) {
  detail::parallel_for(p.n * p.oh, detail::use_threads(p.n * p.h * p.w * p.c, kParallelWork),
                       [&](std::int64_t row) { avg_row_any(x, p, rows, cols, out, row); });
}

template <class T>
void avg_pool_nhwc_backward(const T* g, const NhwcPlanes& p, const NhwcAxisWindows& rows, const NhwcAxisWindows& cols,
                            T* dx) {
  // Note: one image per thread: its windows may overlap, so its additions must not race.
  detail::parallel_for(p.n, detail::use_threads(p.n * p.h * p.w * p.c, kParallelWork),
                       [&](std::int64_t n) { avg_image_backward_any(g, p, rows, cols, dx, n); });
}

#define TAPEGRAD_POOL_NHWC(T)                                                                                       \
  template void max_pool_nhwc<T>(const T*, const NhwcPlanes&, const NhwcMaxWindows&, T*, std::int64_t*);           \
  template void max_pool_nhwc_backward<T>(const T*, const std::int64_t*, const NhwcPlanes&, T*);                    \
  template void max_pool_nhwc_gather<T>(const T*, const std::int64_t*, const NhwcPlanes&, T*);                      \
  template void avg_pool_nhwc<T>(const T*, const NhwcPlanes&, const NhwcAxisWindows&, const NhwcAxisWindows&, T*); \
  template void avg_pool_nhwc_backward<T>(const T*, const NhwcPlanes&, const NhwcAxisWindows&,                      \
                                          const NhwcAxisWindows&, T*);
TAPEGRAD_POOL_NHWC(float)
TAPEGRAD_POOL_NHWC(double)
#undef TAPEGRAD_POOL_NHWC

}  // namespace tapegrad::kernels
