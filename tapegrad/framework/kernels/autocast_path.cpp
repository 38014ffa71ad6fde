// The autocast path switch and the conversions (kernels/bfloat16_convert.h's dispatched loops).
#include <tapegrad/framework/kernels/autocast_path.h>

#include <algorithm>
#include <atomic>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/bfloat16_convert.h>
#include <tapegrad/framework/kernels/environment_path.h>

namespace tapegrad::kernels::autocast {

namespace {

enum class Path { automatic, onednn, fallback };

std::atomic<bool>& forced_by_test() {
  static std::atomic<bool> forced{false};
  return forced;
}

}  // namespace

bool fallback_forced() {
  static const Path path = path_from_environment("TAPEGRAD_AUTOCAST_PATH", Path::automatic,
                                                 {{"onednn", Path::onednn}, {"fallback", Path::fallback}});
  return path == Path::fallback || forced_by_test().load(std::memory_order_relaxed);
}

void force_fallback(bool forced) { forced_by_test().store(forced, std::memory_order_relaxed); }

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n) {
  // Note: split into one contiguous chunk per thread (each rounds its elements independently, so the bits do not
  // depend on the thread count); a pass this long runs at one core's memory bandwidth, and the other threads
  // would otherwise wait at the next parallel region.
  const bool threaded = detail::use_threads(n, detail::kElementwiseParallel);
  if (!threaded) return float_to_bfloat16(x, y, n);
  const std::int64_t chunks = omp_get_max_threads();
  detail::parallel_for(chunks, true, [&](std::int64_t chunk) {
    // Note: chunk boundaries on multiples of 16 elements (a 64-byte line of floats) keep the vector loops aligned.
    const auto bound = [&](std::int64_t c) { return std::min(n, (n * c / chunks + 15) / 16 * 16); };
    const std::int64_t first = bound(chunk), last = chunk + 1 == chunks ? n : bound(chunk + 1);
    if (last > first) float_to_bfloat16(x + first, y + first, last - first);
  });
}
void widen_bf16(const std::uint16_t* x, float* y, std::int64_t n) { bfloat16_to_float(x, y, n); }

}  // namespace tapegrad::kernels::autocast
