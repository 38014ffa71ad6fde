// Dropout's mask as bytes and its passes (kernels/dropout_mask.h). The vector loops are dispatched; the
// OpenMP split is done outside them (one chunk per thread), from kElementwiseParallel elements up.
#include <tapegrad/framework/kernels/dropout_mask.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/dispatch.h>

namespace tapegrad::kernels {

namespace {

// keep[2i] and keep[2i + 1] from the low and high halves of draw i.
TAPEGRAD_DISPATCH
void keep_from_draws(std::int64_t draws, const std::uint64_t* bits, std::uint64_t threshold, unsigned char* keep) {
  const auto t = static_cast<std::int64_t>(threshold);  // at most 2^32: signed compares are exact
#pragma omp simd
  for (std::int64_t i = 0; i < draws; ++i) {
    const auto low = static_cast<std::int64_t>(bits[i] & 0xffffffffu), high = static_cast<std::int64_t>(bits[i] >> 32);
    keep[2 * i] = low >= t ? 1 : 0;
    keep[2 * i + 1] = high >= t ? 1 : 0;
  }
}

template <class T>
[[gnu::always_inline]] inline void apply_body(std::int64_t n, const T* x, const unsigned char* keep, T kept, T* out) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) out[j] = x[j] * (keep[j] ? kept : T(0));
}

template <class T>
[[gnu::always_inline]] inline void relu_body(std::int64_t n, const T* x, const unsigned char* keep, T kept, T* out,
                                             unsigned char* flags) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) {
    const T v = x[j];
    const bool passes = !(v <= T(0));  // relu's rule: NaN passes
    out[j] = (passes ? v : T(0)) * (keep[j] ? kept : T(0));
    flags[j] = static_cast<unsigned char>(keep[j] | (passes ? 2 : 0));
  }
}

template <class T>
[[gnu::always_inline]] inline void relu_backward_body(std::int64_t n, const T* g, const unsigned char* flags, T kept,
                                                      T* dx) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) {
    const T dropped = g[j] * ((flags[j] & 1) ? kept : T(0));
    dx[j] = (flags[j] & 2) ? dropped : T(0);
  }
}

template <class T>
[[gnu::always_inline]] inline void add_body(std::int64_t n, const T* x, const T* y, const unsigned char* keep, T kept,
                                            T* out) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) out[j] = x[j] + y[j] * (keep[j] ? kept : T(0));
}

TAPEGRAD_DISPATCH void apply_range(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out) {
  apply_body(n, x, keep, kept, out);
}
TAPEGRAD_DISPATCH void apply_range(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out) {
  apply_body(n, x, keep, kept, out);
}
TAPEGRAD_DISPATCH void relu_range(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out,
                                  unsigned char* flags) {
  relu_body(n, x, keep, kept, out, flags);
}
TAPEGRAD_DISPATCH void relu_range(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out,
                                  unsigned char* flags) {
  relu_body(n, x, keep, kept, out, flags);
}
TAPEGRAD_DISPATCH void relu_backward_range(std::int64_t n, const float* g, const unsigned char* flags, float kept,
                                           float* dx) {
  relu_backward_body(n, g, flags, kept, dx);
}
TAPEGRAD_DISPATCH void relu_backward_range(std::int64_t n, const double* g, const unsigned char* flags, double kept,
                                           double* dx) {
  relu_backward_body(n, g, flags, kept, dx);
}
// Note: without contraction, so that the product is rounded before the sum as add(x, dropout(y)) rounds it (the
// AVX2 and AVX-512 clones would otherwise fuse them into one FMA, and differ from the two ops in the last bit).
#define TAPEGRAD_NO_CONTRACTION __attribute__((optimize("fp-contract=off")))
TAPEGRAD_DISPATCH TAPEGRAD_NO_CONTRACTION void add_range(std::int64_t n, const float* x, const float* y,
                                                         const unsigned char* keep, float kept, float* out) {
  add_body(n, x, y, keep, kept, out);
}
TAPEGRAD_DISPATCH TAPEGRAD_NO_CONTRACTION void add_range(std::int64_t n, const double* x, const double* y,
                                                         const unsigned char* keep, double kept, double* out) {
  add_body(n, x, y, keep, kept, out);
}
#undef TAPEGRAD_NO_CONTRACTION

// body(begin, count) over [0, n) in one chunk per OpenMP thread (when long enough), else in one call.
template <class Body>
void in_chunks(std::int64_t n, Body body) {
  if (!detail::use_threads(n, detail::kElementwiseParallel)) return body(std::int64_t{0}, n);
  const std::int64_t parts = omp_get_max_threads();
  // Note: chunk starts are multiples of 64 elements, so no two threads share a cache line of keep bytes.
  const std::int64_t chunk = (n / parts + 63) / 64 * 64;
  detail::parallel_for(parts, true, [&](std::int64_t i) {
    const std::int64_t begin = std::min(n, i * chunk);
    body(begin, std::min(n, begin + chunk) - begin);
  });
}

}  // namespace

DropoutStream::DropoutStream(Generator& generator, double p)
    : engine_(generator.engine()),
      threshold_(static_cast<std::uint64_t>(std::min(std::ceil(p * 4294967296.0), 4294967296.0))) {}

void DropoutStream::next(unsigned char* keep, std::int64_t n) {
  if (n <= 0) return;
  // Note: element i is dropped when half < p * 2^32 as a double; for an integer half that is half < ceil(p * 2^32).
  const auto kept = [&](std::uint64_t half) -> unsigned char { return half >= threshold_ ? 1 : 0; };
  if (has_pending_) {
    *keep++ = kept(pending_ >> 32);
    has_pending_ = false;
    --n;
  }
  constexpr std::int64_t kDraws = 2048;
  std::uint64_t bits[kDraws];
  while (n >= 2) {
    const std::int64_t draws = std::min(kDraws, n / 2);
    for (std::int64_t i = 0; i < draws; ++i) bits[i] = engine_();
    keep_from_draws(draws, bits, threshold_, keep);
    keep += 2 * draws;
    n -= 2 * draws;
  }
  if (n == 1) {
    pending_ = engine_();
    *keep = kept(pending_ & 0xffffffffu);
    has_pending_ = true;
  }
}

void apply_keep(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { apply_range(c, x + b, keep + b, kept, out + b); });
}
void apply_keep(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { apply_range(c, x + b, keep + b, kept, out + b); });
}
void relu_keep(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out, unsigned char* flags) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { relu_range(c, x + b, keep + b, kept, out + b, flags + b); });
}
void relu_keep(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out,
               unsigned char* flags) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { relu_range(c, x + b, keep + b, kept, out + b, flags + b); });
}
void relu_keep_backward(std::int64_t n, const float* g, const unsigned char* flags, float kept, float* dx) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { relu_backward_range(c, g + b, flags + b, kept, dx + b); });
}
void relu_keep_backward(std::int64_t n, const double* g, const unsigned char* flags, double kept, double* dx) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { relu_backward_range(c, g + b, flags + b, kept, dx + b); });
}
void add_keep(std::int64_t n, const float* x, const float* y, const unsigned char* keep, float kept, float* out) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { add_range(c, x + b, y + b, keep + b, kept, out + b); });
}
void add_keep(std::int64_t n, const double* x, const double* y, const unsigned char* keep, double kept, double* out) {
  in_chunks(n, [&](std::int64_t b, std::int64_t c) { add_range(c, x + b, y + b, keep + b, kept, out + b); });
}

}  // namespace tapegrad::kernels
