// BatchNorm's passes over a whole input: batch statistics, the per-channel affine map, the gradient sums and the
// training dx, each choosing its visiting order and its threads (the innermost loops are batch_norm_runs.cpp).
//
// Note: the input is viewed as [N, C, S] with S the product of the dims after the channel dim. With S > 1
// (conv feature maps) each thread owns whole channels and walks N contiguous runs of S values; a channel's
// values are touched two or three times in a row while they are still in cache, so the data crosses memory
// about once per direction. With S == 1 ([N, C] after a Linear) a channel's values are strided, so threads
// own blocks of kBlock adjacent channels and walk rows, vectorizing across channels instead; from
// use_row_tiles()'s row count on (a channels-last map as [N*H*W, C], a big batch) batch_norm_row_passes.cpp's tiles.
// Per-channel sums accumulate in double for both dtypes, and the variance is computed from deviations (from
// the mean in two passes on the few-row [N, C] path, from the channel's first value in one pass on the others),
// so a large mean does not cancel the variance away.
#include <tapegrad/framework/kernels/batch_norm_passes.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/batch_norm_row_passes.h>
#include <tapegrad/framework/kernels/batch_norm_runs.h>
#include <tapegrad/framework/kernels/detail/prefetch_run.h>

namespace tapegrad::kernels {

namespace {

constexpr std::int64_t kBlock = 64;          // channels per task on the [N, C] path
constexpr std::int64_t kParallelMin = 32768;  // below this many elements, threads cost more than they save

using Layout = BatchNormLayout;
using Doubles = std::vector<double>;

// Runs per_channel(c) for every channel (S > 1) or per_block(c0, width) for blocks of channels (S == 1).
template <class PerChannel, class PerBlock>
void for_channels(const Layout& l, PerChannel per_channel, PerBlock per_block) {
  const bool threaded = detail::use_threads(l.numel(), kParallelMin);
  if (l.s > 1 || l.c == 1) {
    detail::parallel_for(l.c, threaded, per_channel);
  } else {
    const std::int64_t blocks = (l.c + kBlock - 1) / kBlock;
    detail::parallel_for(blocks, threaded,
                         [&](std::int64_t b) { per_block(b * kBlock, std::min(kBlock, l.c - b * kBlock)); });
  }
}

// ---- kernels: one channel (S > 1), or one block of channels on the rows of [N, C] ----

// Mean and sum of squared deviations of channel c, in one pass over the data.
// Note: the sums are of d = x - x0 with x0 the channel's first value (the shifted-data algorithm), in double:
// then sum(d^2) - sum(d)^2 / count only cancels when |mean - x0| is huge against the spread, and even an x0
// 1e4 standard deviations out loses ~1e-8 relative in double, below float32's resolution. A large mean
// cancels nothing, unlike the textbook sum(x^2) - sum(x)^2 / count.
template <class T>
void moments_channel(const T* x, const Layout& l, std::int64_t c, double& mean, double& var_sum) {
  const double shift = static_cast<double>(x[c * l.s]);
  double sum = 0, squares = 0;
  for (std::int64_t n = 0; n < l.n; ++n) {
    const T* p = x + (n * l.c + c) * l.s;
    if (n + 1 < l.n) prefetch_run(p + l.c * l.s, l.s);
    kernels::shifted_moments(p, l.s, shift, sum, squares);
  }
  const double count = static_cast<double>(l.per_channel());
  mean = shift + sum / count;
  var_sum = std::max(0.0, squares - sum * sum / count);
}

template <class T>
void moments_block(const T* x, const Layout& l, std::int64_t c0, std::int64_t width, double* mean, double* var_sum) {
  double acc[kBlock] = {};
  for (std::int64_t n = 0; n < l.n; ++n) kernels::accumulate_row(x + n * l.c + c0, width, acc);
  for (std::int64_t j = 0; j < width; ++j) {
    mean[j] = acc[j] / static_cast<double>(l.n);
    acc[j] = 0;
  }
  for (std::int64_t n = 0; n < l.n; ++n) kernels::accumulate_squared_deviation_row(x + n * l.c + c0, width, mean, acc);
  for (std::int64_t j = 0; j < width; ++j) var_sum[j] = acc[j];
}

// One run or one row of the affine map, with ReLU applied as it stores when `relu`.
template <class T>
void affine_run(const T* p, T* q, std::int64_t n, T shift, T scale, T offset, bool relu) {
  if (relu)
    kernels::affine_relu(p, q, n, shift, scale, offset);
  else
    kernels::affine(p, q, n, shift, scale, offset);
}

template <class T>
void affine_row(const T* p, T* q, std::int64_t width, const T* shift, const T* scale, const T* offset, bool relu) {
  if (relu)
    kernels::affine_row_relu(p, q, width, shift, scale, offset);
  else
    kernels::affine_row(p, q, width, shift, scale, offset);
}

// dst = (src - shift) * scale + offset over channel c, then ReLU when `relu`.
template <class T>
void affine_channel(const T* src, const Layout& l, std::int64_t c, T shift, T scale, T offset, T* dst, bool relu) {
  for (std::int64_t n = 0; n < l.n; ++n) {
    const std::int64_t base = (n * l.c + c) * l.s;
    const T* p = src + base;
    T* q = dst + base;
    if (n + 1 < l.n) {
      prefetch_run(p + l.c * l.s, l.s);
      prefetch_run_for_write(q + l.c * l.s, l.s);
    }
    affine_run(p, q, l.s, shift, scale, offset, relu);
  }
}

template <class T>
void affine_block(const T* src, const Layout& l, std::int64_t c0, std::int64_t width, const T* shift, const T* scale,
                  const T* offset, T* dst, bool relu) {
  for (std::int64_t n = 0; n < l.n; ++n)
    affine_row(src + n * l.c + c0, dst + n * l.c + c0, width, shift, scale, offset, relu);
}

// The forward's ReLU input coefficients per channel, (x - shift) * scale + offset in T exactly as the forward
// pass computed them, when the backward folds in ReLU's rule (see batch_norm_train_backward).
template <class T>
struct ReluMask {
  std::vector<T> shift, scale, offset;
  ReluMask(const Doubles& mean, const Doubles& invstd, const Doubles& weight, const Doubles& bias)
      : shift(mean.size()), scale(mean.size()), offset(mean.size()) {
    for (std::size_t c = 0; c < mean.size(); ++c) {
      shift[c] = static_cast<T>(mean[c]);
      scale[c] = static_cast<T>(invstd[c] * weight[c]);
      offset[c] = static_cast<T>(bias[c]);
    }
  }
};

// One run or one row of the gradient kernels, masked by ReLU's rule when `mask` is not null.
template <class T>
void grad_sums_run(const T* g, const T* x, std::int64_t n, double mean, const ReluMask<T>* mask, std::int64_t c,
                   double& sum_g, double& sum_gxc) {
  if (mask)
    kernels::grad_sums_relu(g, x, n, mean, mask->shift[c], mask->scale[c], mask->offset[c], sum_g, sum_gxc);
  else
    kernels::grad_sums(g, x, n, mean, sum_g, sum_gxc);
}

template <class T>
void grad_input_run(const T* g, const T* x, T* dx, std::int64_t n, T mean, T a, T b, T d, const ReluMask<T>* mask,
                    std::int64_t c) {
  if (mask)
    kernels::grad_input_relu(g, x, dx, n, mean, a, b, d, mask->scale[c], mask->offset[c]);
  else
    kernels::grad_input(g, x, dx, n, mean, a, b, d);
}

template <class T>
void grad_sums_row_run(const T* g, const T* x, std::int64_t width, const double* mean, const ReluMask<T>* mask,
                   std::int64_t c0, double* sum_g, double* sum_gxc) {
  if (mask)
    kernels::grad_sums_row_relu(g, x, width, mean, mask->shift.data() + c0, mask->scale.data() + c0,
                                mask->offset.data() + c0, sum_g, sum_gxc);
  else
    kernels::grad_sums_row(g, x, width, mean, sum_g, sum_gxc);
}

template <class T>
void grad_input_row_run(const T* g, const T* x, T* dx, std::int64_t width, const T* mean, const T* a, const T* b,
                    const T* d, const ReluMask<T>* mask, std::int64_t c0) {
  if (mask)
    kernels::grad_input_row_relu(g, x, dx, width, mean, a, b, d, mask->scale.data() + c0, mask->offset.data() + c0);
  else
    kernels::grad_input_row(g, x, dx, width, mean, a, b, d);
}

// sum_g = sum(g), sum_gxc = sum(g * (x - mean)) over channel c.
template <class T>
void grad_sums_channel(const T* g, const T* x, const Layout& l, std::int64_t c, double mean, double& sum_g,
                       double& sum_gxc, const ReluMask<T>* mask = nullptr) {
  double a = 0, b = 0;
  for (std::int64_t n = 0; n < l.n; ++n) {
    const std::int64_t base = (n * l.c + c) * l.s;
    const T* pg = g + base;
    const T* px = x + base;
    if (n + 1 < l.n) {
      prefetch_run(pg + l.c * l.s, l.s);
      prefetch_run(px + l.c * l.s, l.s);
    }
    grad_sums_run(pg, px, l.s, mean, mask, c, a, b);
  }
  sum_g = a;
  sum_gxc = b;
}

template <class T>
void grad_sums_block(const T* g, const T* x, const Layout& l, std::int64_t c0, std::int64_t width, const double* mean,
                     double* sum_g, double* sum_gxc, const ReluMask<T>* mask = nullptr) {
  double a[kBlock] = {}, b[kBlock] = {};
  for (std::int64_t n = 0; n < l.n; ++n)
    grad_sums_row_run(g + n * l.c + c0, x + n * l.c + c0, width, mean, mask, c0, a, b);
  for (std::int64_t j = 0; j < width; ++j) {
    sum_g[j] = a[j];
    sum_gxc[j] = b[j];
  }
}

// Training dx = a*g + b*(x - mean) + d over channel c (coefficients from train_coefficients, batch_norm_passes.h).
template <class T>
void grad_input_channel(const T* g, const T* x, const Layout& l, std::int64_t c, T mean, T a, T b, T d, T* dx,
                        const ReluMask<T>* mask) {
  for (std::int64_t n = 0; n < l.n; ++n) {
    const std::int64_t base = (n * l.c + c) * l.s;
    const T* pg = g + base;
    const T* px = x + base;
    T* q = dx + base;
    if (n + 1 < l.n) {
      prefetch_run(pg + l.c * l.s, l.s);
      prefetch_run(px + l.c * l.s, l.s);
      prefetch_run_for_write(q + l.c * l.s, l.s);
    }
    grad_input_run(pg, px, q, l.s, mean, a, b, d, mask, c);
  }
}

template <class T>
void grad_input_block(const T* g, const T* x, const Layout& l, std::int64_t c0, std::int64_t width, const T* mean,
                      const T* a, const T* b, const T* d, T* dx, const ReluMask<T>* mask) {
  for (std::int64_t n = 0; n < l.n; ++n) {
    const std::int64_t base = n * l.c + c0;
    grad_input_row_run(g + base, x + base, dx + base, width, mean, a, b, d, mask, c0);
  }
}

// ---- the memory-order path: whole passes over the tensor, sample by sample ----

// Note: for a tensor that fits the last-level cache with room to spare, each pass visits the data in memory
// order (all channels of sample 0, then of sample 1, ...): one sequential stream, which the hardware
// prefetcher follows at full bandwidth, instead of the per-channel order's N short streams per channel.
// The elementwise pass after a reduction then finds the data in L3 instead of L2. Bigger tensors keep the
// per-channel order, which reads them from memory once per pair of passes.
constexpr std::int64_t kSweepMaxBytes = 16 << 20;

template <class T>
bool use_sweep(const Layout& l) {
  return l.s > 1 && l.n > 1 && l.numel() * static_cast<std::int64_t>(sizeof(T)) <= kSweepMaxBytes;
}

// Calls run(thread, c, offset of the run) for every (sample, channel) run in memory order, the samples split
// over threads; each thread first calls begin(thread, thread count). Threads own disjoint samples, so
// per-thread partial sums are merged afterwards in thread order (deterministic for a given thread count).
template <class Begin, class Run>
void sweep(const Layout& l, Begin begin, Run run) {
  const auto part = [&](int t, int count) {
    begin(t, count);
    const std::int64_t first = l.n * t / count, last = l.n * (t + 1) / count;
    for (std::int64_t n = first; n < last; ++n)
      for (std::int64_t c = 0; c < l.c; ++c) run(t, c, (n * l.c + c) * l.s);
  };
  const int threads = std::min<int>(omp_get_max_threads(), static_cast<int>(l.n));
  if (threads < 2 || !detail::use_threads(l.numel(), kParallelMin)) return part(0, 1);
#pragma omp parallel num_threads(threads)
  part(omp_get_thread_num(), omp_get_num_threads());
}

// dst = (src - shift) * scale + offset per channel, then ReLU when `relu`, in memory order.
template <class T>
void affine_sweep(const T* src, const Layout& l, const std::vector<T>& shift, const std::vector<T>& scale,
                  const std::vector<T>& offset, T* dst, bool relu) {
  sweep(l, [](int, int) {}, [&](int, std::int64_t c, std::int64_t at) {
    const T* p = src + at;
    T* q = dst + at;
    affine_run(p, q, l.s, shift[c], scale[c], offset[c], relu);
  });
}

// Per-thread, per-channel partial sums, two of them per channel.
struct Partials {
  std::vector<Doubles> first, second;
  void prepare(int thread, int threads, std::int64_t channels) {
#pragma omp single
    {
      first.assign(static_cast<std::size_t>(threads), Doubles());
      second.assign(static_cast<std::size_t>(threads), Doubles());
    }
    first[static_cast<std::size_t>(thread)].assign(static_cast<std::size_t>(channels), 0.0);
    second[static_cast<std::size_t>(thread)].assign(static_cast<std::size_t>(channels), 0.0);
  }
  double total_first(std::int64_t c) const {
    double sum = 0;
    for (const Doubles& part : first) sum += part[static_cast<std::size_t>(c)];
    return sum;
  }
  double total_second(std::int64_t c) const {
    double sum = 0;
    for (const Doubles& part : second) sum += part[static_cast<std::size_t>(c)];
    return sum;
  }
};

// train_forward in memory order: moments (shifted by each channel's first value, as moments_channel), then
// the normalisation.
template <class T>
void train_forward_sweep(const T* px, const Layout& l, const Doubles& weight, const Doubles& bias, double eps, T* py,
                         Doubles& mean, Doubles& var_sum, Doubles& invstd, bool relu) {
  Doubles shift(static_cast<std::size_t>(l.c));
  for (std::int64_t c = 0; c < l.c; ++c) shift[c] = static_cast<double>(px[c * l.s]);
  Partials partials;
  sweep(l, [&](int t, int count) { partials.prepare(t, count, l.c); },
        [&](int t, std::int64_t c, std::int64_t offset) {
          kernels::shifted_moments(px + offset, l.s, shift[c], partials.first[t][c], partials.second[t][c]);
        });
  const double count = static_cast<double>(l.per_channel());
  std::vector<T> t_shift(static_cast<std::size_t>(l.c)), t_scale(t_shift.size()), t_offset(t_shift.size());
  for (std::int64_t c = 0; c < l.c; ++c) {
    const double sum = partials.total_first(c), squares = partials.total_second(c);
    mean[c] = shift[c] + sum / count;
    var_sum[c] = std::max(0.0, squares - sum * sum / count);
    invstd[c] = 1.0 / std::sqrt(var_sum[c] / count + eps);
    t_shift[c] = static_cast<T>(mean[c]);
    t_scale[c] = static_cast<T>(invstd[c] * weight[c]);
    t_offset[c] = static_cast<T>(bias[c]);
  }
  affine_sweep(px, l, t_shift, t_scale, t_offset, py, relu);
}

// The per-channel gradient sums in memory order.
template <class T>
void grad_sums_sweep(const T* pg, const T* px, const Layout& l, const Doubles& mean, Doubles& sum_g, Doubles& sum_gxc,
                     const ReluMask<T>* mask = nullptr) {
  Partials partials;
  sweep(l, [&](int t, int count) { partials.prepare(t, count, l.c); },
        [&](int t, std::int64_t c, std::int64_t offset) {
          grad_sums_run(pg + offset, px + offset, l.s, mean[c], mask, c, partials.first[t][c], partials.second[t][c]);
        });
  for (std::int64_t c = 0; c < l.c; ++c) {
    sum_g[c] = partials.total_first(c);
    sum_gxc[c] = partials.total_second(c);
  }
}

}  // namespace

// ---- forward passes ----

template <class T>
void batch_norm_train_forward(const T* px, const Layout& l, const Doubles& weight, const Doubles& bias, double eps,
                              T* py, Doubles& mean, Doubles& var_sum, Doubles& invstd, bool relu) {
  if (use_row_tiles(l)) return rows_train_forward(px, l, weight, bias, eps, py, mean, var_sum, invstd, relu);
  if (use_sweep<T>(l)) return train_forward_sweep(px, l, weight, bias, eps, py, mean, var_sum, invstd, relu);
  const double count = static_cast<double>(l.per_channel());
  auto finish = [&](std::int64_t c) { invstd[c] = 1.0 / std::sqrt(var_sum[c] / count + eps); };
  for_channels(
      l,
      [&](std::int64_t c) {
        moments_channel(px, l, c, mean[c], var_sum[c]);
        finish(c);
        affine_channel(px, l, c, static_cast<T>(mean[c]), static_cast<T>(invstd[c] * weight[c]),
                       static_cast<T>(bias[c]), py, relu);
      },
      [&](std::int64_t c0, std::int64_t width) {
        moments_block(px, l, c0, width, mean.data() + c0, var_sum.data() + c0);
        T shift[kBlock], scale[kBlock], offset[kBlock];
        for (std::int64_t j = 0; j < width; ++j) {
          finish(c0 + j);
          shift[j] = static_cast<T>(mean[c0 + j]);
          scale[j] = static_cast<T>(invstd[c0 + j] * weight[c0 + j]);
          offset[j] = static_cast<T>(bias[c0 + j]);
        }
        affine_block(px, l, c0, width, shift, scale, offset, py, relu);
      });
}

template <class T>
void batch_norm_affine(const T* ps, const Layout& l, const Doubles& shift, const Doubles& scale, const Doubles& offset,
                       T* po, bool relu) {
  std::vector<T> t_shift(shift.begin(), shift.end()), t_scale(scale.begin(), scale.end()),
      t_offset(offset.begin(), offset.end());
  if (use_row_tiles(l)) return rows_affine(ps, l, t_shift.data(), t_scale.data(), t_offset.data(), po, relu);
  // Note: one elementwise pass and no reduction, so memory order wins at every size.
  if (l.s > 1 && l.n > 1) {
    return affine_sweep(ps, l, t_shift, t_scale, t_offset, po, relu);
  }
  // Note: [N, C] rows whole, one call per row, rather than in blocks of kBlock channels (which the reductions
  // need): a block walked the rows with a stride and made one short call per row and block, 3.3% of a
  // batch-1024 inference step at 1 thread (two BatchNorm1d(512)).
  if (l.s == 1) {
    detail::parallel_for(l.n, detail::use_threads(l.numel(), kParallelMin), [&](std::int64_t n) {
      affine_row(ps + n * l.c, po + n * l.c, l.c, t_shift.data(), t_scale.data(), t_offset.data(), relu);
    });
    return;
  }
  for_channels(
      l, [&](std::int64_t c) { affine_channel(ps, l, c, t_shift[c], t_scale[c], t_offset[c], po, relu); },
      [&](std::int64_t c0, std::int64_t width) {
        affine_block(ps, l, c0, width, t_shift.data() + c0, t_scale.data() + c0, t_offset.data() + c0, po, relu);
      });
}

// ---- backward passes ----

template <class T>
void batch_norm_grad_sums(const T* pg, const T* px, const Layout& l, const Doubles& mean, Doubles& sum_g,
                          Doubles& sum_gxc) {
  if (use_row_tiles(l)) return rows_grad_sums(pg, px, l, mean, TileMask<T>{}, sum_g, sum_gxc);
  if (use_sweep<T>(l)) return grad_sums_sweep(pg, px, l, mean, sum_g, sum_gxc);
  for_channels(
      l, [&](std::int64_t c) { grad_sums_channel(pg, px, l, c, mean[c], sum_g[c], sum_gxc[c]); },
      [&](std::int64_t c0, std::int64_t width) {
        grad_sums_block(pg, px, l, c0, width, mean.data() + c0, sum_g.data() + c0, sum_gxc.data() + c0);
      });
}

template <class T>
void batch_norm_train_backward(const T* pg, const T* px, const Layout& l, const Doubles& weight, const Doubles& mean,
                               const Doubles& invstd, T* pdx, Doubles& sum_g, Doubles& sum_gxc,
                               const Doubles* relu_bias) {
  const bool want_dx = pdx != nullptr;
  const double count = static_cast<double>(l.per_channel());
  // Note: ReLU's rule is applied to g inside both passes, on ReLU's input recomputed from x: no masked copy of
  // g is written and read back, and the forward's output need not be kept.
  std::optional<ReluMask<T>> relu_mask;
  if (relu_bias) relu_mask.emplace(mean, invstd, weight, *relu_bias);
  const ReluMask<T>* mask = relu_mask ? &*relu_mask : nullptr;
  if (use_row_tiles(l)) {
    const TileMask<T> tile_mask = mask ? TileMask<T>{mask->shift.data(), mask->scale.data(), mask->offset.data()}
                                       : TileMask<T>{};
    return rows_train_backward(pg, px, l, weight, mean, invstd, pdx, sum_g, sum_gxc, tile_mask);
  }
  if (use_sweep<T>(l)) {
    grad_sums_sweep(pg, px, l, mean, sum_g, sum_gxc, mask);
    if (!want_dx) return;
    std::vector<T> m(static_cast<std::size_t>(l.c)), a(m.size()), b(m.size()), d(m.size());
    train_coefficients_in(0, l.c, weight, invstd, mean, sum_g, sum_gxc, count, m.data(), a.data(), b.data(), d.data());
    sweep(l, [](int, int) {}, [&](int, std::int64_t c, std::int64_t offset) {
      grad_input_run(pg + offset, px + offset, pdx + offset, l.s, m[c], a[c], b[c], d[c], mask, c);
    });
    return;
  }
  for_channels(
      l,
      [&](std::int64_t c) {
        grad_sums_channel(pg, px, l, c, mean[c], sum_g[c], sum_gxc[c], mask);
        if (!want_dx) return;
        const auto k = train_coefficients(weight[c], invstd[c], sum_g[c], sum_gxc[c], count);
        grad_input_channel(pg, px, l, c, static_cast<T>(mean[c]), static_cast<T>(k.a), static_cast<T>(k.b),
                           static_cast<T>(k.d), pdx, mask);
      },
      [&](std::int64_t c0, std::int64_t width) {
        grad_sums_block(pg, px, l, c0, width, mean.data() + c0, sum_g.data() + c0, sum_gxc.data() + c0, mask);
        if (!want_dx) return;
        T m[kBlock], a[kBlock], b[kBlock], d[kBlock];
        train_coefficients_in(c0, width, weight, invstd, mean, sum_g, sum_gxc, count, m, a, b, d);
        grad_input_block(pg, px, l, c0, width, m, a, b, d, pdx, mask);
      });
}
#define TAPEGRAD_BATCH_NORM_PASSES(T)                                                                         \
  template void batch_norm_train_forward<T>(const T*, const Layout&, const Doubles&, const Doubles&, double, T*,  \
                                            Doubles&, Doubles&, Doubles&, bool);                                  \
  template void batch_norm_affine<T>(const T*, const Layout&, const Doubles&, const Doubles&, const Doubles&, T*,  \
                                     bool);                                                                       \
  template void batch_norm_grad_sums<T>(const T*, const T*, const Layout&, const Doubles&, Doubles&, Doubles&);    \
  template void batch_norm_train_backward<T>(const T*, const T*, const Layout&, const Doubles&, const Doubles&,    \
                                             const Doubles&, T*, Doubles&, Doubles&, const Doubles*);
TAPEGRAD_BATCH_NORM_PASSES(float)
TAPEGRAD_BATCH_NORM_PASSES(double)
#undef TAPEGRAD_BATCH_NORM_PASSES

}  // namespace tapegrad::kernels
