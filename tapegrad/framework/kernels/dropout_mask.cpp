// Dropout's mask as bytes and its passes (kernels/dropout_mask.h). The vector loops are dispatched; the
// OpenMP split is done outside them (one chunk per thread), from kElementwiseParallel elements up.
#include <tapegrad/framework/kernels/dropout_mask.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
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


// ---- std::mt19937_64's sequence, vectorised (its parameters: n 312, m 156, r 31, and the tempering) ----

constexpr std::size_t kWords = 312, kMiddle = 156;
constexpr std::uint64_t kMatrix = 0xb5026f5aa96619e9ULL, kUpper = ~std::uint64_t{0} << 31, kLower = ~kUpper;

[[gnu::always_inline]] inline std::uint64_t twisted(std::uint64_t current, std::uint64_t next, std::uint64_t far) {
  const std::uint64_t y = (current & kUpper) | (next & kLower);
  return far ^ (y >> 1) ^ ((0 - (y & 1)) & kMatrix);
}

// The engine's refill of all 312 words, in its order: word k reads word k + 1 not yet refilled and word k + 156
// (refilled for k >= 156), so each of the two loops is a vector loop; the last word reads the refilled word 0.
TAPEGRAD_DISPATCH
void twist(std::uint64_t* x) {
  for (std::size_t k = 0; k < kWords - kMiddle; ++k) x[k] = twisted(x[k], x[k + 1], x[k + kMiddle]);
  for (std::size_t k = kWords - kMiddle; k < kWords - 1; ++k) x[k] = twisted(x[k], x[k + 1], x[k - (kWords - kMiddle)]);
  x[kWords - 1] = twisted(x[kWords - 1], x[0], x[kMiddle - 1]);
}

TAPEGRAD_DISPATCH
void temper(std::int64_t count, const std::uint64_t* x, std::uint64_t* out) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint64_t z = x[i];
    z ^= (z >> 29) & 0x5555555555555555ULL;
    z ^= (z << 17) & 0x71d67fffeda60000ULL;
    z ^= (z << 37) & 0xfff7eee000000000ULL;
    out[i] = z ^ (z >> 43);
  }
}

// The engine's state from its text form (the standard library prints the 312 words, then its position), false
// when the text is not that.
bool read_state(const std::mt19937_64& engine, std::uint64_t* words, std::size_t& position) {
  std::ostringstream text;
  text << engine;
  std::istringstream in(text.str());
  for (std::size_t k = 0; k < kWords; ++k) in >> words[k];
  in >> position;
  std::string rest;
  return !in.fail() && !(in >> rest) && position <= kWords;
}

void write_state(std::mt19937_64& engine, const std::uint64_t* words, std::size_t position) {
  std::ostringstream text;
  for (std::size_t k = 0; k < kWords; ++k) text << words[k] << ' ';
  text << position;
  std::istringstream in(text.str());
  in >> engine;
}

// Draws count numbers after `position` of the state `words`, as the engine would.
void draw_bulk(std::uint64_t* words, std::size_t& position, std::uint64_t* out, std::int64_t count) {
  while (count > 0) {
    if (position >= kWords) {
      twist(words);
      position = 0;
    }
    const auto run = std::min<std::int64_t>(count, static_cast<std::int64_t>(kWords - position));
    temper(run, words + position, out);
    position += static_cast<std::size_t>(run);
    out += run;
    count -= run;
  }
}

// Whether the bulk draws reproduce this standard library's std::mt19937_64 (its sequence and its text form),
// checked once per process; when they do not, streams draw one number at a time from the engine.
bool bulk_draws_match() {
  static const bool match = [] {
    std::mt19937_64 engine(20261207);
    engine.discard(500);
    std::uint64_t words[kWords];
    std::size_t position = 0;
    if (!read_state(engine, words, position)) return false;
    std::vector<std::uint64_t> bulk(1000);
    draw_bulk(words, position, bulk.data(), 1000);
    for (std::uint64_t value : bulk)
      if (value != engine()) return false;
    std::mt19937_64 restored;
    write_state(restored, words, position);
    return restored == engine;
  }();
  return match;
}

// Below this many numbers the text round trip of the state costs more than the scalar draws it saves.
constexpr std::int64_t kMinBulkDraws = 4096;

}  // namespace

DropoutStream::DropoutStream(Generator& generator, double p)
    : engine_(generator.engine()),
      threshold_(static_cast<std::uint64_t>(std::min(std::ceil(p * 4294967296.0), 4294967296.0))) {}

DropoutStream::~DropoutStream() {
  if (bulk_) write_state(engine_, state_, position_);
}

void DropoutStream::draw(std::uint64_t* out, std::int64_t count) {
  if (bulk_) return draw_bulk(state_, position_, out, count);
  for (std::int64_t i = 0; i < count; ++i) out[i] = engine_();
}

void DropoutStream::next(unsigned char* keep, std::int64_t n) {
  if (n <= 0) return;
  if (!bulk_ && n / 2 >= kMinBulkDraws && bulk_draws_match()) bulk_ = read_state(engine_, state_, position_);
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
    draw(bits, draws);
    keep_from_draws(draws, bits, threshold_, keep);
    keep += 2 * draws;
    n -= 2 * draws;
  }
  if (n == 1) {
    draw(&pending_, 1);
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
