// One core's memory bandwidth on buffers the size of bn_fwd_bwd's input ([64, 64, 28, 28] float32, 12.8 MB),
// the floor under every memory-bound kernel: a read-only sum, a write-only fill, and a copy (read + write).
// docs/performance.md and docs/performance_history.md hold the memory-bound kernels (BatchNorm, ReLU, pooling)
// against these.
// Note: four buffers in turn, so no pass finds its data in the 32 MB L3 left by the previous one.
#include <benchmark/benchmark.h>
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace {

constexpr std::int64_t kElements = 64LL * 64 * 28 * 28;
constexpr int kBuffers = 4;

std::vector<std::vector<float>>& buffers() {
  static std::vector<std::vector<float>> all(kBuffers, std::vector<float>(kElements, 1.0f));
  return all;
}

void read_sum(benchmark::State& state) {
  tapegrad::set_num_threads(1);
  int next = 0;
  for (auto _ : state) {
    const std::vector<float>& buffer = buffers()[static_cast<std::size_t>(next++ % kBuffers)];
    // Note: Eigen's sum keeps several vector accumulators; a plain loop would measure the add latency.
    const float total = Eigen::Map<const Eigen::ArrayXf>(buffer.data(), kElements).sum();
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * kElements * static_cast<std::int64_t>(sizeof(float)));
}

void write_fill(benchmark::State& state) {
  int next = 0;
  for (auto _ : state) {
    std::vector<float>& buffer = buffers()[static_cast<std::size_t>(next++ % kBuffers)];
    std::fill(buffer.begin(), buffer.end(), 2.0f);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * static_cast<std::int64_t>(sizeof(float)));
}

// Bytes counted once per element read and once per element written.
void copy(benchmark::State& state) {
  int next = 0;
  for (auto _ : state) {
    const std::vector<float>& from = buffers()[static_cast<std::size_t>(next % kBuffers)];
    std::vector<float>& to = buffers()[static_cast<std::size_t>((next + 1) % kBuffers)];
    ++next;
    std::copy(from.begin(), from.end(), to.begin());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kElements * static_cast<std::int64_t>(sizeof(float)));
}

}  // namespace

BENCHMARK(read_sum)->Unit(benchmark::kMillisecond);
BENCHMARK(write_fill)->Unit(benchmark::kMillisecond);
BENCHMARK(copy)->Unit(benchmark::kMillisecond);
