// matmul with a transposed operand read in place (GEMM's transpose flag) against the same product with the
// operand copied first (`.contiguous()`, what every transposed operand cost before matmul read views) and
// against the plain contiguous product, side by side in one run. No grad: the kernels alone.
//   strided_matmul [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>

#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;

template <class Product>
void measure(benchmark::State& state, Product product) {
  const std::int64_t n = state.range(0);
  Generator generator(7);
  const Tensor x = randn({n, n}, generator), w = randn({n, n}, generator);
  NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = product(x, w);
    benchmark::DoNotOptimize(y.data<float>());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * n), benchmark::Counter::kIsIterationInvariantRate);
}

void contiguous(benchmark::State& state) {
  measure(state, [](const Tensor& x, const Tensor& w) { return matmul(x, w); });
}
void transposed_in_place(benchmark::State& state) {
  measure(state, [](const Tensor& x, const Tensor& w) { return matmul(x, w.t()); });
}
void transposed_copied(benchmark::State& state) {
  measure(state, [](const Tensor& x, const Tensor& w) { return matmul(x, w.t().contiguous()); });
}

}  // namespace

BENCHMARK(contiguous)->Arg(128)->Arg(512);
BENCHMARK(transposed_in_place)->Arg(128)->Arg(512);
BENCHMARK(transposed_copied)->Arg(128)->Arg(512);
