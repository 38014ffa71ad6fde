// The float64 GEMM (kernels/gemm_f64) on each micro-kernel this CPU runs, side by side: on an AVX-512 machine the
// default build times its AVX-512, AVX2 and SSE2 tiles, so the tiles other CPUs get are measured too (on this
// CPU's caches and clock). Shapes are (m, n, k), no transposes, C += A B.
//   gemm_f64_tiles [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
// Threads: tapegrad's default (set OMP_NUM_THREADS to pin it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <tapegrad/framework/kernels/gemm_f64.h>

namespace {

void product(benchmark::State& state, const std::string& kernel, std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n), 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 17) / 8.0 - 1.0;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(i % 13) / 8.0 - 0.75;
  for (auto _ : state) {
    tapegrad::kernels::gemm_f64_on(kernel, false, false, m, n, k, 1.0, a.data(), k, b.data(), n, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  struct Shape {
    std::int64_t m, n, k;
  };
  // The matmul anchor's 1024^3, a mid-size square, a Linear(784, 512) forward at batch 128, two small squares.
  const std::vector<Shape> shapes = {{1024, 1024, 1024}, {256, 256, 256}, {128, 512, 784}, {128, 128, 128},
                                     {64, 64, 64}};
  for (const std::string& kernel : tapegrad::kernels::gemm_f64_kernels())
    for (const Shape& s : shapes) {
      std::string name = "gemm_f64/" + kernel + "/m:" + std::to_string(s.m) + "/n:" + std::to_string(s.n) +
                         "/k:" + std::to_string(s.k);
      std::replace(name.begin(), name.end(), ' ', '_');  // "AVX-512 8x24" -> "AVX-512_8x24", one word
      benchmark::RegisterBenchmark(name.c_str(), [kernel, s](benchmark::State& state) {
        product(state, kernel, s.m, s.n, s.k);
      });
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
