// SyncBatchNorm's local passes over one rank's input (detail/sync_batch_norm_passes.h): the per-channel loops,
// dispatched at run time, and the order in which they visit the tensor.
#include <tapegrad/framework/distributed/detail/sync_batch_norm_passes.h>

// Note: no fused multiply-adds in this file, as in BatchNorm's kernels (kernels/batch_norm_runs.cpp, built with
// -ffp-contract=off): the AVX2 and AVX-512 clones of the loops below would otherwise contract (x - m) * k + b
// into an FMA, so every CPU would round the normalisation and dx differently from BatchNorm and from the baseline.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <omp.h>

#include <algorithm>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::distributed::detail {

namespace {

using Layout = ChannelLayout;
using Doubles = std::vector<double>;

// Whether the per-channel loops run across the OpenMP threads (detail::use_threads: not for a small batch, one
// thread, or inside a region).
bool threaded(const Layout& l) { return tapegrad::detail::use_threads(l.n * l.c * l.s, 32768); }

// One channel's values on this rank: n runs of s contiguous values, `stride` apart (C * S), from `p`.
struct Runs {
  std::int64_t n, s, stride;
};
Runs runs_of(const Layout& l) { return {l.n, l.s, l.c * l.s}; }

// The per-channel loops, each compiled for AVX-512, AVX2 and the baseline and chosen at load time
// (kernels/dispatch.h), as BatchNorm's own (kernels/batch_norm_runs.cpp): its kernels are internal to
// libtapegrad, so these are the same loop bodies (same arithmetic, each operation rounded once: no contraction,
// see the top of this file), over the runs of one channel per call. Before, plain `omp simd` loops at the x86-64-v2
// baseline made a SyncBatchNorm+ReLU step 3.1x BatchNorm+ReLU's CPU time on [64, 32, 28, 28].
// Note: sums in double, whatever T; `omp simd` splits them over the vector lanes.
template <class T>
[[gnu::always_inline]] inline void moments_body(const T* p, Runs r, double shift, double& sum_out,
                                                double& squares_out) {
  double sum = 0, squares = 0;
  for (std::int64_t k = 0; k < r.n; ++k, p += r.stride) {
#pragma omp simd reduction(+ : sum, squares)
    for (std::int64_t i = 0; i < r.s; ++i) {
      const double d = static_cast<double>(p[i]) - shift;
      sum += d;
      squares += d * d;
    }
  }
  sum_out += sum;
  squares_out += squares;
}

template <class T>
[[gnu::always_inline]] inline void affine_body(const T* p, T* q, Runs r, T shift, T scale, T offset) {
  for (std::int64_t k = 0; k < r.n; ++k, p += r.stride, q += r.stride) {
#pragma omp simd
    for (std::int64_t i = 0; i < r.s; ++i) q[i] = (p[i] - shift) * scale + offset;
  }
}

template <class T>
[[gnu::always_inline]] inline void grad_sums_body(const T* g, const T* x, Runs r, double mean, double& sum_g,
                                                  double& sum_gxc) {
  double a = 0, b = 0;
  for (std::int64_t k = 0; k < r.n; ++k, g += r.stride, x += r.stride) {
#pragma omp simd reduction(+ : a, b)
    for (std::int64_t i = 0; i < r.s; ++i) {
      const double gv = static_cast<double>(g[i]);
      a += gv;
      b += gv * (static_cast<double>(x[i]) - mean);
    }
  }
  sum_g += a;
  sum_gxc += b;
}

template <class T>
[[gnu::always_inline]] inline void grad_input_body(const T* g, const T* x, T* dx, Runs r, T mean, T ka, T kb, T kd) {
  for (std::int64_t k = 0; k < r.n; ++k, g += r.stride, x += r.stride, dx += r.stride) {
#pragma omp simd
    for (std::int64_t i = 0; i < r.s; ++i) dx[i] = ka * g[i] + kb * (x[i] - mean) + kd;
  }
}

}  // namespace

// Note: outside the anonymous namespace: target_clones makes an ifunc, which GCC needs to be able to name.
namespace kernels {

TAPEGRAD_DISPATCH void channel_moments(const float* p, Runs r, double shift, double& sum, double& squares) {
  moments_body(p, r, shift, sum, squares);
}
TAPEGRAD_DISPATCH void channel_moments(const double* p, Runs r, double shift, double& sum, double& squares) {
  moments_body(p, r, shift, sum, squares);
}
TAPEGRAD_DISPATCH void channel_affine(const float* p, float* q, Runs r, float shift, float scale, float offset) {
  affine_body(p, q, r, shift, scale, offset);
}
TAPEGRAD_DISPATCH void channel_affine(const double* p, double* q, Runs r, double shift, double scale, double offset) {
  affine_body(p, q, r, shift, scale, offset);
}
TAPEGRAD_DISPATCH void channel_grad_sums(const float* g, const float* x, Runs r, double mean, double& sum_g,
                                         double& sum_gxc) {
  grad_sums_body(g, x, r, mean, sum_g, sum_gxc);
}
TAPEGRAD_DISPATCH void channel_grad_sums(const double* g, const double* x, Runs r, double mean, double& sum_g,
                                         double& sum_gxc) {
  grad_sums_body(g, x, r, mean, sum_g, sum_gxc);
}
TAPEGRAD_DISPATCH void channel_grad_input(const float* g, const float* x, float* dx, Runs r, float mean, float ka,
                                          float kb, float kd) {
  grad_input_body(g, x, dx, r, mean, ka, kb, kd);
}
TAPEGRAD_DISPATCH void channel_grad_input(const double* g, const double* x, double* dx, Runs r, double mean,
                                          double ka, double kb, double kd) {
  grad_input_body(g, x, dx, r, mean, ka, kb, kd);
}

}  // namespace kernels

namespace {

using namespace kernels;

// Note: a tensor that fits the last-level cache with room to spare is visited in memory order (all channels
// of sample 0, then of sample 1, ...), BatchNorm's rule (kernels/batch_norm_passes.cpp): one sequential stream
// that the hardware prefetcher follows, instead of N short runs per channel, and the elementwise pass after a
// reduction finds the data in cache. Per-channel sums still add the runs in sample order (each thread its own
// samples, the threads' partial sums merged in thread order), so both orders give the same sums.
constexpr std::int64_t kSweepMaxBytes = 16 << 20;

template <class T>
bool use_sweep(const Layout& l) {
  return l.s > 1 && l.n > 1 && l.n * l.c * l.s * static_cast<std::int64_t>(sizeof(T)) <= kSweepMaxBytes;
}

// Calls run(thread, c, offset of the run) for every (sample, channel) run in memory order, the samples split
// over `threads` threads.
template <class Run>
void sweep(const Layout& l, int threads, Run run) {
  const auto part = [&](int t) {
    const std::int64_t first = l.n * t / threads, last = l.n * (t + 1) / threads;
    for (std::int64_t n = first; n < last; ++n)
      for (std::int64_t c = 0; c < l.c; ++c) run(t, c, (n * l.c + c) * l.s);
  };
  if (threads < 2) return part(0);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) part(t);
}

int sweep_threads(const Layout& l) {
  return threaded(l) ? static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), l.n)) : 1;
}

// Per-channel sums of two quantities, `add(c, offset, runs, sum1, sum2)` adding those of `runs` from `offset`:
// run by run in memory order with per-thread partial sums merged in thread order, or a whole channel at once.
template <class T, class Add>
void channel_sums(const Layout& l, double* first, double* second, Add add) {
  const std::size_t channels = static_cast<std::size_t>(l.c);
  if (!use_sweep<T>(l)) {
    tapegrad::detail::parallel_for(l.c, threaded(l), [&](std::int64_t c) {
      first[c] = second[c] = 0;
      add(c, c * l.s, runs_of(l), first[c], second[c]);
    });
    return;
  }
  const int threads = sweep_threads(l);
  const Runs one{1, l.s, 0};
  std::vector<Doubles> partial(static_cast<std::size_t>(2 * threads), Doubles(channels, 0.0));
  sweep(l, threads, [&](int t, std::int64_t c, std::int64_t at) {
    add(c, at, one, partial[static_cast<std::size_t>(2 * t)][static_cast<std::size_t>(c)],
        partial[static_cast<std::size_t>(2 * t + 1)][static_cast<std::size_t>(c)]);
  });
  for (std::size_t c = 0; c < channels; ++c) {
    double a = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      a += partial[static_cast<std::size_t>(2 * t)][c];
      b += partial[static_cast<std::size_t>(2 * t + 1)][c];
    }
    first[c] = a;
    second[c] = b;
  }
}

// Calls map(c, offset, values) for every run (all of a channel's runs at once in channel order).
template <class T, class Map>
void channel_map(const Layout& l, Map map) {
  if (!use_sweep<T>(l)) {
    tapegrad::detail::parallel_for(l.c, threaded(l), [&](std::int64_t c) { map(c, c * l.s, runs_of(l)); });
    return;
  }
  const Runs one{1, l.s, 0};
  sweep(l, sweep_threads(l), [&](int, std::int64_t c, std::int64_t at) { map(c, at, one); });
}

}  // namespace

// This rank's per-channel mean and sum of squared deviations, in one pass and in double.
// Note: the sums are of d = x - x0, x0 the channel's first value on this rank (the shifted-data algorithm of
// BatchNorm's own kernel), so a large mean cancels nothing.
template <class T>
void local_moments(const T* x, const Layout& l, Doubles& mean, Doubles& m2) {
  const double count = static_cast<double>(l.per_channel());
  Doubles shift(static_cast<std::size_t>(l.c), 0.0), sum(shift.size()), squares(shift.size());
  if (count > 0)
    for (std::int64_t c = 0; c < l.c; ++c) shift[static_cast<std::size_t>(c)] = static_cast<double>(x[c * l.s]);
  channel_sums<T>(l, sum.data(), squares.data(), [&](std::int64_t c, std::int64_t at, Runs r, double& a, double& b) {
    channel_moments(x + at, r, shift[static_cast<std::size_t>(c)], a, b);
  });
  for (std::size_t c = 0; c < shift.size(); ++c) {
    mean[c] = count > 0 ? shift[c] + sum[c] / count : 0.0;
    m2[c] = count > 0 ? std::max(0.0, squares[c] - sum[c] * sum[c] / count) : 0.0;
  }
}

// out = (x - mean) * scale + offset per channel.
template <class T>
void normalize(const T* x, const Layout& l, const Doubles& mean, const Doubles& scale, const Doubles& offset, T* out) {
  std::vector<T> m(mean.begin(), mean.end()), k(scale.begin(), scale.end()), b(offset.begin(), offset.end());
  channel_map<T>(l, [&](std::int64_t c, std::int64_t at, Runs r) {
    const auto i = static_cast<std::size_t>(c);
    channel_affine(x + at, out + at, r, m[i], k[i], b[i]);
  });
}

// This rank's per-channel sum(g) and sum(g * (x - mean)).
template <class T>
void local_grad_sums(const T* g, const T* x, const Layout& l, const Doubles& mean, double* sum_g, double* sum_gxc) {
  channel_sums<T>(l, sum_g, sum_gxc, [&](std::int64_t c, std::int64_t at, Runs r, double& a, double& b) {
    channel_grad_sums(g + at, x + at, r, mean[static_cast<std::size_t>(c)], a, b);
  });
}

// dx = weight * invstd * (g - sum_g / count - (x - mean) * invstd^2 * sum_gxc / count), global sums and count.
template <class T>
void grad_input(const T* g, const T* x, const Layout& l, const Doubles& weight, const Doubles& mean,
                const Doubles& invstd, const double* sum_g, const double* sum_gxc, double count, T* dx) {
  const std::size_t channels = static_cast<std::size_t>(l.c);
  std::vector<T> ka(channels), m(channels), kb(channels), kd(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double a = weight[c] * invstd[c];
    ka[c] = static_cast<T>(a);
    m[c] = static_cast<T>(mean[c]);
    kb[c] = static_cast<T>(-a * invstd[c] * invstd[c] * sum_gxc[c] / count);
    kd[c] = static_cast<T>(-a * sum_g[c] / count);
  }
  channel_map<T>(l, [&](std::int64_t c, std::int64_t at, Runs r) {
    const auto i = static_cast<std::size_t>(c);
    channel_grad_input(g + at, x + at, dx + at, r, m[i], ka[i], kb[i], kd[i]);
  });
}

template void local_moments(const float*, const ChannelLayout&, Doubles&, Doubles&);
template void local_moments(const double*, const ChannelLayout&, Doubles&, Doubles&);
template void normalize(const float*, const ChannelLayout&, const Doubles&, const Doubles&, const Doubles&, float*);
template void normalize(const double*, const ChannelLayout&, const Doubles&, const Doubles&, const Doubles&, double*);
template void local_grad_sums(const float*, const float*, const ChannelLayout&, const Doubles&, double*, double*);
template void local_grad_sums(const double*, const double*, const ChannelLayout&, const Doubles&, double*, double*);
template void grad_input(const float*, const float*, const ChannelLayout&, const Doubles&, const Doubles&,
                         const Doubles&, const double*, const double*, double, float*);
template void grad_input(const double*, const double*, const ChannelLayout&, const Doubles&, const Doubles&,
                         const Doubles&, const double*, const double*, double, double*);

}  // namespace tapegrad::distributed::detail
