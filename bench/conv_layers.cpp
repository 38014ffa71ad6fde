// The convolution ops alone, on the layer shapes of bench/compare's cnn and resnet workloads (batch 64):
// forward, input gradient and weight gradient, each timed on its own (no tape), median of --reps runs.
//   conv_layers [--threads N] [--reps R] [--smoke]
// Prints one line per layer and direction:
//   layer=<name> op=<forward|input_grad|weight_grad> threads=<n> ms=<median> gflops=<g>
// where gflops counts 2 * N * O * (C/groups) * kh * kw * OH * OW per call (the same for all three directions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;

struct Layer {
  const char* name;
  std::int64_t channels, size, out_channels, kernel, stride, padding;
};

// Note: the first two are the cnn's convolutions, the rest one of each distinct resnet convolution.
const Layer layers[] = {
    {"cnn_conv1", 1, 28, 32, 3, 1, 1},         {"cnn_conv2", 32, 14, 64, 3, 1, 1},
    {"resnet_stem", 3, 32, 32, 3, 1, 1},       {"resnet_s1", 32, 32, 32, 3, 1, 1},
    {"resnet_s2_down", 32, 32, 64, 3, 2, 1},   {"resnet_s2", 64, 16, 64, 3, 1, 1},
    {"resnet_s2_short", 32, 32, 64, 1, 2, 0},  {"resnet_s3_down", 64, 16, 128, 3, 2, 1},
    {"resnet_s3", 128, 8, 128, 3, 1, 1},       {"resnet_s3_short", 64, 16, 128, 1, 2, 0},
    {"resnet_s4_down", 128, 8, 256, 3, 2, 1},  {"resnet_s4", 256, 4, 256, 3, 1, 1},
    {"resnet_s4_short", 128, 8, 256, 1, 2, 0},
};

double median_ms(int reps, const std::function<void()>& run) {
  run();  // warm-up: primitive creation, block cache
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--smoke") == 0)
      reps = 1;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--reps R] [--smoke]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || reps < 1) return 2;
  set_num_threads(threads);
  manual_seed(0);
  const std::int64_t batch = 64;
  for (const Layer& layer : layers) {
    const Tensor input = randn({batch, layer.channels, layer.size, layer.size});
    const Tensor weight = randn({layer.out_channels, layer.channels, layer.kernel, layer.kernel});
    const std::int64_t out_size = conv_output_size(layer.size, layer.kernel, layer.stride, layer.padding, 1);
    const Tensor grad_output = randn({batch, layer.out_channels, out_size, out_size});
    const double flops = 2.0 * static_cast<double>(batch * layer.out_channels * layer.channels * layer.kernel *
                                                   layer.kernel * out_size * out_size);
    const std::pair<const char*, std::function<void()>> ops[] = {
        {"forward", [&] { conv2d(input, weight, Tensor(), layer.stride, layer.padding); }},
        {"input_grad",
         [&] { conv2d_input_grad(grad_output, weight, input.shape(), layer.stride, layer.padding); }},
        {"weight_grad",
         [&] { conv2d_weight_grad(input, grad_output, weight.shape(), layer.stride, layer.padding); }},
    };
    for (const auto& [op, run] : ops) {
      const double ms = median_ms(reps, run);
      std::printf("layer=%s op=%s threads=%d ms=%.4g gflops=%.4g\n", layer.name, op, threads, ms,
                  flops / ms * 1e-6);
      std::fflush(stdout);
    }
  }
}
