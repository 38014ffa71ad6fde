// The one question every threaded loop asks before it enters an OpenMP region.
#include <tapegrad/framework/detail/parallel_loop.h>

#include <omp.h>

namespace tapegrad::detail {

bool use_threads(std::int64_t work, std::int64_t threshold) {
  return work >= threshold && omp_get_max_threads() > 1 && !omp_in_parallel();
}

}  // namespace tapegrad::detail
