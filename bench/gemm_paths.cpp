// The two float32 GEMM paths of kernels::gemm side by side on the products of the benchmarked models: oneDNN's
// dnnl_sgemm and a cached oneDNN matmul primitive. Its numbers are the rule in kernels/gemm.cpp (which products
// take the primitive). Shapes are (transpose_a, transpose_b, m, n, k): a Linear(in, out) at batch B runs
// x W^T (0, 1, B, out, in) forward, g W (0, 0, B, in, out) for dx and g^T x (1, 0, out, in, B) for dW.
//   gemm_paths [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
// Threads: tapegrad's default (set OMP_NUM_THREADS to pin it).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include <tapegrad/framework/kernels/gemm.h>

namespace {

using tapegrad::kernels::GemmPath;

void product(benchmark::State& state, GemmPath path) {
  const bool transpose_a = state.range(0) != 0, transpose_b = state.range(1) != 0;
  const std::int64_t m = state.range(2), n = state.range(3), k = state.range(4);
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) / 8.0f - 1.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) / 8.0f - 0.75f;
  const std::int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  for (auto _ : state) {
    tapegrad::kernels::gemm(transpose_a, transpose_b, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n,
                            path);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void sgemm(benchmark::State& state) { product(state, GemmPath::sgemm); }
void matmul_primitive(benchmark::State& state) { product(state, GemmPath::matmul_primitive); }

// The three products of a Linear(in, out) at batch `batch`.
void linear_products(benchmark::internal::Benchmark* b, std::int64_t batch, std::int64_t in, std::int64_t out) {
  b->Args({0, 1, batch, out, in})->Args({0, 0, batch, in, out})->Args({1, 0, out, in, batch});
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ta", "tb", "m", "n", "k"});
  for (std::int64_t batch : {1, 4, 16, 128, 1024}) linear_products(b, batch, 784, 512);  // mlp's first layer
  linear_products(b, 128, 512, 512);
  linear_products(b, 128, 512, 10);
  linear_products(b, 64, 3136, 128);  // cnn's first Linear
  b->Args({0, 0, 1024, 1024, 1024});  // the matmul workload
}

}  // namespace

BENCHMARK(sgemm)->Apply(shapes);
BENCHMARK(matmul_primitive)->Apply(shapes);
