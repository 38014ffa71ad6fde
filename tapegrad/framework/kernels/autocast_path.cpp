// The autocast path switch and the conversions (kernels/bfloat16_convert.h's dispatched loops).
#include <tapegrad/framework/kernels/autocast_path.h>

#include <atomic>

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

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n) { float_to_bfloat16(x, y, n); }
void widen_bf16(const std::uint16_t* x, float* y, std::int64_t n) { bfloat16_to_float(x, y, n); }

}  // namespace tapegrad::kernels::autocast
