#pragma once
// Internal: when a loop enters an OpenMP parallel region at all, and the loop helpers that ask.
#include <cstdint>

#include <omp.h>

namespace tapegrad::detail {

/// Elementwise passes at least this long are split across the OpenMP threads. Note: a pass over a big tensor
/// runs at the memory bandwidth of one core, and every core adds its own; run serially, it also leaves the
/// other threads spinning at the next parallel region (a quarter of the 2-thread cnn profile).
inline constexpr std::int64_t kElementwiseParallel = std::int64_t{1} << 16;

/// Whether a loop of `work` units, worth splitting from `threshold` units up, should run in an OpenMP parallel
/// region: long enough, more than one thread allowed, and not already inside a region.
/// Note: ask this instead of writing an if() clause on the pragma. libgomp enters a region whose if() is false,
/// or whose team is one thread, all the same, and ends it with a futex wake-up system call: 1.2 us on this VM
/// against 0.2 us for a 512-element pass, several percent of a batch-1 inference step (2026-12-06 profile).
/// Note: inline, not in the library, so that the distributed library (which links only the exported API) asks it too.
inline bool use_threads(std::int64_t work, std::int64_t threshold) {
  return work >= threshold && omp_get_max_threads() > 1 && !omp_in_parallel();
}

/// body(i) for i in [0, count), split statically across the OpenMP threads when `threaded`, else a plain loop on
/// the calling thread.
template <class Body>
void parallel_for(std::int64_t count, bool threaded, Body body) {
  if (threaded) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) body(i);
  } else {
    for (std::int64_t i = 0; i < count; ++i) body(i);
  }
}

}  // namespace tapegrad::detail
