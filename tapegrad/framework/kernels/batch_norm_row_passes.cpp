// BatchNorm's passes over [R, C] inputs in tiles of rows (batch_norm_row_passes.h).
//
// Note: a channels-last [64, 32, 28, 28] map is 50176 rows of 32 channels. The per-row kernels
// (batch_norm_runs.h, written for BatchNorm1d's few wide rows) cost one dispatched call per row and per 64-channel
// block, and loaded and stored every channel's double accumulator for each row of 32 values; the forward also
// took three passes (sum, squared deviations, affine). Here a call covers a tile of rows, the accumulators stay
// in registers across it (batch_norm_tiles.cpp), and the statistics take one pass: the deviations from each
// channel's value in row 0, summed with their squares in double, as the [N, C, S] paths do (batch_norm_passes.cpp
// says why a shift that is a sample value cannot cancel the variance away). Row 0 of a channels-last map is the
// element (n 0, h 0, w 0), the one those paths shift by, so both formats differ only in the summation order.
// Threads own contiguous row ranges and their per-thread sums are merged in thread order: deterministic for a
// given thread count.
#include <tapegrad/framework/kernels/batch_norm_row_passes.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include <tapegrad/framework/detail/parallel_loop.h>

namespace tapegrad::kernels {

namespace {

using Layout = BatchNormLayout;
using Doubles = std::vector<double>;

// Note: the tiles beat the per-row kernels on BatchNorm1d's [64..1024, 512] and [64, 64] too (bench/batch_norm_rows,
// 2026-12-07, 1 thread, under load: 1.3-1.6x less CPU time); fewer rows keep the per-row kernels, unmeasured.
std::atomic<std::int64_t> min_rows{64};

constexpr std::int64_t kTileBytes = 16 << 10;  // a tile stays in L1 while its chunks of channels walk it
constexpr std::int64_t kParallelMin = 32768;   // as batch_norm_passes.cpp: below this, threads cost more than they save

template <class T>
std::int64_t tile_rows(const Layout& l) {
  return std::max<std::int64_t>(1, kTileBytes / (std::max<std::int64_t>(l.c, 1) * std::int64_t{sizeof(T)}));
}

// The thread count the passes over `l` use (1 when not threaded).
int thread_count(const Layout& l, std::int64_t tile) {
  if (!detail::use_threads(l.numel(), kParallelMin)) return 1;
  return static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), (l.n + tile - 1) / tile));
}

// body(thread, first row, row count) over the tiles of each thread's contiguous range of rows.
template <class Body>
void over_tiles(const Layout& l, std::int64_t tile, int threads, Body body) {
  const auto part = [&](int t, int count) {
    const std::int64_t first = l.n * t / count, last = l.n * (t + 1) / count;
    for (std::int64_t r = first; r < last; r += tile) body(t, r, std::min(tile, last - r));
  };
  if (threads < 2) return part(0, 1);
#pragma omp parallel num_threads(threads)
  part(omp_get_thread_num(), omp_get_num_threads());
}

// Two per-channel sums per thread, merged in thread order. A team smaller than asked for leaves some zero.
struct Partials {
  std::int64_t channels;
  Doubles first, second;
  Partials(int threads, std::int64_t c)
      : channels(c), first(static_cast<std::size_t>(threads * c)), second(first.size()) {}
  double* first_of(int t) { return first.data() + t * channels; }
  double* second_of(int t) { return second.data() + t * channels; }
  void totals(Doubles& a, Doubles& b) const {
    const std::size_t threads = first.size() / static_cast<std::size_t>(std::max<std::int64_t>(channels, 1));
    for (std::int64_t c = 0; c < channels; ++c) {
      double x = 0, y = 0;
      for (std::size_t t = 0; t < threads; ++t) {
        x += first[t * channels + c];
        y += second[t * channels + c];
      }
      a[c] = x;
      b[c] = y;
    }
  }
};

}  // namespace

bool use_row_tiles(const BatchNormLayout& l) { return l.s == 1 && l.n >= min_rows.load(std::memory_order_relaxed); }

std::int64_t set_row_tiles_min_rows(std::int64_t rows) { return min_rows.exchange(rows); }

template <class T>
void rows_affine(const T* src, const Layout& l, const T* shift, const T* scale, const T* offset, T* out, bool relu) {
  const std::int64_t tile = tile_rows<T>(l);
  over_tiles(l, tile, thread_count(l, tile), [&](int, std::int64_t r, std::int64_t rows) {
    kernels::tile_affine(src + r * l.c, out + r * l.c, rows, l.c, shift, scale, offset, relu);
  });
}

template <class T>
void rows_train_forward(const T* x, const Layout& l, const Doubles& weight, const Doubles& bias, double eps, T* y,
                        Doubles& mean, Doubles& var_sum, Doubles& invstd, bool relu) {
  const std::int64_t tile = tile_rows<T>(l);
  const int threads = thread_count(l, tile);
  const Doubles shift(x, x + l.c);
  Partials partials(threads, l.c);
  over_tiles(l, tile, threads, [&](int t, std::int64_t r, std::int64_t rows) {
    kernels::tile_moments(x + r * l.c, rows, l.c, shift.data(), partials.first_of(t), partials.second_of(t));
  });
  Doubles sum(static_cast<std::size_t>(l.c)), squares(sum.size());
  partials.totals(sum, squares);
  const double count = static_cast<double>(l.n);
  std::vector<T> t_shift(sum.size()), t_scale(sum.size()), t_offset(sum.size());
  for (std::int64_t c = 0; c < l.c; ++c) {
    mean[c] = shift[c] + sum[c] / count;
    var_sum[c] = std::max(0.0, squares[c] - sum[c] * sum[c] / count);
    invstd[c] = 1.0 / std::sqrt(var_sum[c] / count + eps);
    t_shift[c] = static_cast<T>(mean[c]);
    t_scale[c] = static_cast<T>(invstd[c] * weight[c]);
    t_offset[c] = static_cast<T>(bias[c]);
  }
  rows_affine(x, l, t_shift.data(), t_scale.data(), t_offset.data(), y, relu);
}

template <class T>
void rows_grad_sums(const T* g, const T* x, const Layout& l, const Doubles& mean, const TileMask<T>& mask,
                    Doubles& sum_g, Doubles& sum_gxc) {
  const std::int64_t tile = tile_rows<T>(l);
  const int threads = thread_count(l, tile);
  Partials partials(threads, l.c);
  over_tiles(l, tile, threads, [&](int t, std::int64_t r, std::int64_t rows) {
    kernels::tile_grad_sums(g + r * l.c, x + r * l.c, rows, l.c, mean.data(), mask, partials.first_of(t),
                            partials.second_of(t));
  });
  partials.totals(sum_g, sum_gxc);
}

template <class T>
void rows_train_backward(const T* g, const T* x, const Layout& l, const Doubles& weight, const Doubles& mean,
                         const Doubles& invstd, T* dx, Doubles& sum_g, Doubles& sum_gxc, const TileMask<T>& mask) {
  rows_grad_sums(g, x, l, mean, mask, sum_g, sum_gxc);
  if (!dx) return;
  const double count = static_cast<double>(l.n);
  std::vector<T> m(static_cast<std::size_t>(l.c)), a(m.size()), b(m.size()), d(m.size());
  train_coefficients_in(0, l.c, weight, invstd, mean, sum_g, sum_gxc, count, m.data(), a.data(), b.data(), d.data());
  const std::int64_t tile = tile_rows<T>(l);
  over_tiles(l, tile, thread_count(l, tile), [&](int, std::int64_t r, std::int64_t rows) {
    kernels::tile_grad_input(g + r * l.c, x + r * l.c, dx + r * l.c, rows, l.c, m.data(), a.data(), b.data(),
                             d.data(), mask);
  });
}

#define TAPEGRAD_BATCH_NORM_ROW_PASSES(T)                                                                     \
  template void rows_train_forward<T>(const T*, const Layout&, const Doubles&, const Doubles&, double, T*,      \
                                      Doubles&, Doubles&, Doubles&, bool);                                      \
  template void rows_affine<T>(const T*, const Layout&, const T*, const T*, const T*, T*, bool);                \
  template void rows_grad_sums<T>(const T*, const T*, const Layout&, const Doubles&, const TileMask<T>&,        \
                                  Doubles&, Doubles&);                                                          \
  template void rows_train_backward<T>(const T*, const T*, const Layout&, const Doubles&, const Doubles&,       \
                                       const Doubles&, T*, Doubles&, Doubles&, const TileMask<T>&);
TAPEGRAD_BATCH_NORM_ROW_PASSES(float)
TAPEGRAD_BATCH_NORM_ROW_PASSES(double)
#undef TAPEGRAD_BATCH_NORM_ROW_PASSES

}  // namespace tapegrad::kernels
