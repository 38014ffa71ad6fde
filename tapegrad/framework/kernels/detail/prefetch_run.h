// Software prefetch of whole runs, for BatchNorm's per-channel passes (kernels/batch_norm_passes.cpp).
#pragma once

#include <cstdint>

namespace tapegrad::kernels {

// Asks for the next run of a channel (S values, one cache line at a time) while the current one is summed.
// Note: a channel is N runs of S values, C * S apart; each run is a new short stream that the hardware
// prefetcher only picks up after a few misses, so the first read of every run waited on memory (the
// per-channel reductions were two thirds of bn_fwd_bwd at 1 thread, stalled on their loads).
template <class T>
inline void prefetch_run(const T* run, std::int64_t s) {
  constexpr std::int64_t per_line = 64 / sizeof(T);
  for (std::int64_t k = 0; k < s; k += per_line) __builtin_prefetch(run + k);
}
// The same for a run about to be written: the lines are asked for with intent to write.
template <class T>
inline void prefetch_run_for_write(T* run, std::int64_t s) {
  constexpr std::int64_t per_line = 64 / sizeof(T);
  for (std::int64_t k = 0; k < s; k += per_line) __builtin_prefetch(run + k, 1);
}

}  // namespace tapegrad::kernels
