// The tape's cost per recorded op: the same small elementwise op timed with grad recording on (inputs
// require grad) and under NoGradGuard (same inputs, nothing recorded). On tensors of 4 or 16 floats the
// kernel is a few nanoseconds, so the difference is almost entirely the record: the closure, the saved
// tensors, the output's autograd identity, and dropping the record again when the output dies.
//   tape_overhead [--benchmark_min_time=0.01]
// Counters per op: recorded_ns, no_grad_ns, and overhead_ns = recorded_ns - no_grad_ns (target: < 1000).
// Note: they are this thread's CPU time, not wall time: on a shared machine wall time mostly measures the
// other processes; overhead_wall_ns is reported alongside for a quiet machine.
#include <benchmark/benchmark.h>
#include <time.h>

#include <cstdint>

#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;
/// Nanoseconds from a clock_gettime clock.
double now_ns(clockid_t clock) {
  timespec time{};
  clock_gettime(clock, &time);
  return static_cast<double>(time.tv_sec) * 1e9 + static_cast<double>(time.tv_nsec);
}

/// Thread CPU and wall time of the two halves of a round.
struct Stamp {
  double cpu = now_ns(CLOCK_THREAD_CPUTIME_ID), wall = now_ns(CLOCK_MONOTONIC);
};

template <class Op>
void measure(benchmark::State& state, Op op) {
  const std::int64_t n = state.range(0);
  Generator generator(42);
  Tensor a = rand({n}, generator).add_(0.5).requires_grad_();  // positive: log and div stay finite
  Tensor b = rand({n}, generator).add_(0.5).requires_grad_();
  constexpr int kOpsPerRound = 64;
  double recorded_ns = 0, no_grad_ns = 0, recorded_wall_ns = 0, no_grad_wall_ns = 0;
  std::int64_t rounds = 0;
  for (auto _ : state) {
    // Note: rounds alternate between the two modes so that frequency drift and cache state hit both alike.
    Stamp start;
    for (int i = 0; i < kOpsPerRound; ++i) {
      Tensor c = op(a, b);
      benchmark::DoNotOptimize(c.raw_data());
    }
    Stamp middle;
    {
      NoGradGuard no_grad;
      for (int i = 0; i < kOpsPerRound; ++i) {
        Tensor c = op(a, b);
        benchmark::DoNotOptimize(c.raw_data());
      }
    }
    Stamp end;
    recorded_ns += middle.cpu - start.cpu;
    no_grad_ns += end.cpu - middle.cpu;
    recorded_wall_ns += middle.wall - start.wall;
    no_grad_wall_ns += end.wall - middle.wall;
    ++rounds;
  }
  const double ops = static_cast<double>(rounds) * kOpsPerRound;
  state.counters["recorded_ns"] = recorded_ns / ops;
  state.counters["no_grad_ns"] = no_grad_ns / ops;
  state.counters["overhead_ns"] = (recorded_ns - no_grad_ns) / ops;
  state.counters["overhead_wall_ns"] = (recorded_wall_ns - no_grad_wall_ns) / ops;
  state.counters["tape_size_after"] = static_cast<double>(tape_size());
}

void add_op(benchmark::State& state) { measure(state, [](const Tensor& a, const Tensor& b) { return a + b; }); }
void mul_op(benchmark::State& state) { measure(state, [](const Tensor& a, const Tensor& b) { return a * b; }); }
void div_op(benchmark::State& state) { measure(state, [](const Tensor& a, const Tensor& b) { return a / b; }); }
void exp_op(benchmark::State& state) { measure(state, [](const Tensor& a, const Tensor&) { return exp(a); }); }
void mul_scalar_op(benchmark::State& state) {
  measure(state, [](const Tensor& a, const Tensor&) { return a * 3.0; });
}

// A whole training step on a 16-op chain: forward records, backward walks the records and frees them.
void chain_forward_backward(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  Generator generator(7);
  Tensor x = rand({n}, generator).add_(0.5).requires_grad_();
  constexpr int kDepth = 16;
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kDepth; ++i) y = (i % 2 == 0) ? y * x : y / x + 1.0;
    sum(y).backward();
    x.set_grad(Tensor());
  }
  state.counters["seconds_per_op_fwd_bwd"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * (kDepth * 3 / 2 + 1), benchmark::Counter::kIsRate |
                                                                          benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(add_op)->Arg(4)->Arg(16);
BENCHMARK(mul_op)->Arg(4)->Arg(16);
BENCHMARK(div_op)->Arg(4)->Arg(16);
BENCHMARK(exp_op)->Arg(4)->Arg(16);
BENCHMARK(mul_scalar_op)->Arg(4)->Arg(16);
BENCHMARK(chain_forward_backward)->Arg(4)->Arg(16);
