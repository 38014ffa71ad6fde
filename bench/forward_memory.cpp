// An inference loop that forgot NoGradGuard: 100,000 forward passes of a small MLP whose parameters require
// grad, never calling backward. Every pass records on the tape; the records must be dropped once their
// outputs die, so resident memory stays flat. Prints RSS at intervals; exits 1 if it grew by more than
// --max-growth-mb (default 4) after warm-up.
//   forward_memory [--passes N] [--max-growth-mb M]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "resident_memory.h"
#include <tapegrad/tapegrad.h>

using tapegrad::bench::resident_mib;

int main(int argc, char** argv) {
  using namespace tapegrad;
  long passes = 100000;
  double max_growth_mib = 4.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--max-growth-mb") == 0 && i + 1 < argc) {
      max_growth_mib = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--passes N] [--max-growth-mb M]\n", argv[0]);
      return 2;
    }
  }

  Generator generator(1);
  Tensor x = uniform({32, 1}, -1.0, 1.0, generator);
  Tensor w1 = randn({1, 64}, generator).requires_grad_(), b1 = randn({1, 64}, generator).requires_grad_();
  Tensor w2 = randn({1, 64}, generator).requires_grad_(), b2 = randn({1}, generator).requires_grad_();
  auto forward = [&] {
    Tensor hidden = log(1.0 + exp(x * w1 + b1));
    return mean(sum(hidden * w2, {1}, true) + b2);  // 9 recorded ops
  };

  // Note: the tape holds up to ~4,000 records between prunes, so memory reaches its plateau after a few
  // hundred passes plus the allocator's warm-up; measuring growth from an earlier point counts that plateau.
  if (passes < 20000) passes = 20000;
  const long warmup = std::max(passes / 100, 2000L);
  double baseline = 0, peak = 0, checksum = 0;
  auto start = std::chrono::steady_clock::now();
  std::printf("%10s %12s %12s %10s\n", "passes", "rss_mib", "growth_mib", "tape_size");
  for (long pass = 1; pass <= passes; ++pass) {
    checksum += forward().item();
    if (pass == warmup) baseline = resident_mib();
    if (pass % (passes / 10) == 0 || pass == warmup) {
      double rss = resident_mib();
      if (pass > warmup && rss > peak) peak = rss;
      std::printf("%10ld %12.2f %12.2f %10zu\n", pass, rss, pass >= warmup ? rss - baseline : 0.0, tape_size());
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double growth = peak - baseline;
  std::printf("forward_memory: %ld passes (9 recorded ops each) in %.2f s (%.0f ns/op incl. kernels), "
              "RSS after warm-up %.2f MiB, peak %.2f MiB, growth %.2f MiB (limit %.1f), checksum %.6g\n",
              passes, seconds, seconds * 1e9 / (passes * 9.0), baseline, peak, growth, max_growth_mib, checksum);
  if (growth > max_growth_mib) {
    std::printf("forward_memory: FAIL: resident memory grew by %.2f MiB over %ld passes without backward\n",
                growth, passes - warmup);
    return 1;
  }
  std::printf("forward_memory: OK: resident memory stayed flat\n");
  return 0;
}
