#pragma once
/// How many threads tapegrad's kernels (its OpenMP loops and GEMMs, and oneDNN's primitives) may use.
#include <tapegrad/export.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Sets the thread count for OpenMP regions (tapegrad's and oneDNN's); must be at least 1.
void set_num_threads(int num_threads);
/// The current thread count (by default the hardware concurrency OpenMP reports).
int get_num_threads();

}  // namespace tapegrad

TAPEGRAD_API_END
