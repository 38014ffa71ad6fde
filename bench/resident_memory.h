#pragma once
// Resident set size of this process, for the memory benchmarks.
#include <unistd.h>

#include <fstream>

namespace tapegrad::bench {

/// Resident set size in MiB, from /proc/self/statm (second field, in pages).
inline double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

}  // namespace tapegrad::bench
