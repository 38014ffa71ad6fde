#pragma once
// Internal: an optimizer's update of one parameter, split into chunks across the OpenMP threads.
#include <algorithm>
#include <cstdint>

#include <tapegrad/framework/detail/parallel_loop.h>

namespace tapegrad::optim::detail {

/// update(begin, count) over [0, n) in chunks, across the OpenMP threads when n is at least kElementwiseParallel.
/// Note: every optimizer's update is elementwise, so the split changes no value: a step gives the same bits at any
/// thread count. It was the largest serial piece of a 2-thread step: SGD's kernel took 12% of the mlp samples
/// while the second thread spun in libgomp (27%).
template <class Update>
void for_chunks(std::int64_t n, Update update) {
  constexpr std::int64_t kChunk = 16384;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const bool threaded = tapegrad::detail::use_threads(n, tapegrad::detail::kElementwiseParallel);
  tapegrad::detail::parallel_for(chunks, threaded, [&](std::int64_t chunk) {
    const std::int64_t begin = chunk * kChunk;
    update(begin, std::min(kChunk, n - begin));
  });
}

}  // namespace tapegrad::optim::detail
