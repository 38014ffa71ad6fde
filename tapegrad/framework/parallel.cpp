// Thread control. One setting drives OpenMP (tapegrad's loops and GEMMs, oneDNN) and Eigen, so a user never has
// to tune two knobs. Note: Eigen runs no product in the library any more; its process-wide thread count is kept
// because get_num_threads reads it (omp_set_num_threads only sets the calling thread's value).
#include <tapegrad/framework/parallel.h>

#include <omp.h>

#include <Eigen/Core>

#include <tapegrad/framework/error.h>

namespace tapegrad {

// Note: omp_set_num_threads only affects parallel regions started by the calling thread (it sets that
// thread's ICV); Eigen::setNbThreads is process-wide. Call this from the main thread before training.
void set_num_threads(int num_threads) {
  if (num_threads < 1) fail("set_num_threads: expected at least 1 thread, got {}", num_threads);
  omp_set_num_threads(num_threads);
  Eigen::setNbThreads(num_threads);
}

// Note: until set_num_threads is called, Eigen::nbThreads() falls back to omp_get_max_threads(), which is
// the hardware default (or OMP_NUM_THREADS), so both agree from the start.
int get_num_threads() { return Eigen::nbThreads(); }

}  // namespace tapegrad
