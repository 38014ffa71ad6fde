// The float32 convolution kernels alone, on the layer shapes of bench/compare's cnn and resnet workloads (batch 64):
// forward, input gradient and weight gradient, each on both paths (im2col + GEMM, and oneDNN's primitives), timed
// interleaved in the same run (im2col, oneDNN, im2col, ...) so a loaded machine slows both alike; medians.
//   conv_layers [--threads N] [--reps R] [--smoke]
// Prints one line per layer and direction:
//   layer=<name> op=<forward|input_grad|weight_grad> threads=<n> im2col_ms=<median> onednn_ms=<median>
//   im2col_cpu_ms=<median> onednn_cpu_ms=<median> im2col_gflops=<g> onednn_gflops=<g> speedup=<im2col/onednn>
//   auto=<the path kernels::conv2d_path picks>
// where *_ms is wall time and *_cpu_ms the process's CPU time per call (all threads, spinning included), and
// gflops and speedup come from the CPU time: on a shared machine the wall time also counts the time the
// scheduler gives to other jobs, the CPU time does not. gflops counts 2 * N * O * (C/groups) * kh * kw * OH * OW
// per call (the same for all three directions), divided by CPU time over the thread count.
// Note: it calls the kernels directly (no tensors, no tape), so it links tapegrad_internal.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>

#include <tapegrad/framework/kernels/conv2d.h>
#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;
using kernels::ConvDirection;
using kernels::ConvGeometry;
using kernels::ConvPath;

struct Layer {
  const char* name;
  std::int64_t channels, size, out_channels, kernel, stride, padding;
  bool bias;
};

// Note: the first two are the cnn's convolutions (with bias), the rest one of each distinct resnet convolution.
const Layer layers[] = {
    {"cnn_conv1", 1, 28, 32, 3, 1, 1, true},          {"cnn_conv2", 32, 14, 64, 3, 1, 1, true},
    {"resnet_stem", 3, 32, 32, 3, 1, 1, false},       {"resnet_s1", 32, 32, 32, 3, 1, 1, false},
    {"resnet_s2_down", 32, 32, 64, 3, 2, 1, false},   {"resnet_s2", 64, 16, 64, 3, 1, 1, false},
    {"resnet_s2_short", 32, 32, 64, 1, 2, 0, false},  {"resnet_s3_down", 64, 16, 128, 3, 2, 1, false},
    {"resnet_s3", 128, 8, 128, 3, 1, 1, false},       {"resnet_s3_short", 64, 16, 128, 1, 2, 0, false},
    {"resnet_s4_down", 128, 8, 256, 3, 2, 1, false},  {"resnet_s4", 256, 4, 256, 3, 1, 1, false},
    {"resnet_s4_short", 128, 8, 256, 1, 2, 0, false},
};

struct Times {
  std::vector<double> wall, cpu;
};

double cpu_now_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

void time_once(Times& times, const std::function<void()>& run) {
  const double cpu = cpu_now_ms();
  const auto start = std::chrono::steady_clock::now();
  run();
  times.wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  times.cpu.push_back(cpu_now_ms() - cpu);
}

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

const char* path_name(ConvPath path) { return path == ConvPath::onednn ? "onednn" : "im2col"; }

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
    const std::int64_t out_size = conv_output_size(layer.size, layer.kernel, layer.stride, layer.padding, 1);
    const ConvGeometry g{batch,        layer.channels, layer.size,     layer.size,    layer.out_channels,
                         layer.kernel, layer.kernel,   out_size,       out_size,      layer.stride,
                         layer.stride, layer.padding,  layer.padding,  1,             1,
                         1};
    const Tensor input = randn({batch, layer.channels, layer.size, layer.size});
    const Tensor weight = randn({layer.out_channels, layer.channels, layer.kernel, layer.kernel});
    const Tensor bias = randn({layer.out_channels});
    const Tensor grad_output = randn({batch, layer.out_channels, out_size, out_size});
    Tensor out = empty(grad_output.shape()), dx = empty(input.shape()), dw = empty(weight.shape()),
           db = empty(bias.shape());
    const float* b = layer.bias ? bias.data<float>() : nullptr;
    float* dbias = layer.bias ? db.data<float>() : nullptr;
    const double flops = 2.0 * static_cast<double>(batch * layer.out_channels * layer.channels * layer.kernel *
                                                   layer.kernel * out_size * out_size);
    struct Direction {
      const char* name;
      ConvDirection direction;
      std::function<void(ConvPath)> run;
    };
    const Direction directions[] = {
        {"forward", ConvDirection::forward,
         [&](ConvPath path) {
           kernels::conv2d_forward(input.data<float>(), weight.data<float>(), b, out.data<float>(), g, path);
         }},
        {"input_grad", ConvDirection::input_grad,
         [&](ConvPath path) {
           kernels::conv2d_input_grad(grad_output.data<float>(), weight.data<float>(), dx.data<float>(), g, path);
         }},
        {"weight_grad", ConvDirection::weight_grad,
         [&](ConvPath path) {
           kernels::conv2d_weight_grad(input.data<float>(), grad_output.data<float>(), dw.data<float>(), dbias, g,
                                       path);
         }},
    };
    for (const Direction& d : directions) {
      d.run(ConvPath::im2col);  // warm-up: primitive creation, block cache
      d.run(ConvPath::onednn);
      Times im2col, onednn;
      for (int r = 0; r < reps; ++r) {
        time_once(im2col, [&] { d.run(ConvPath::im2col); });
        time_once(onednn, [&] { d.run(ConvPath::onednn); });
      }
      const double im2col_cpu = median(im2col.cpu), onednn_cpu = median(onednn.cpu);
      std::printf(
          "layer=%s op=%s threads=%d im2col_ms=%.4g onednn_ms=%.4g im2col_cpu_ms=%.4g onednn_cpu_ms=%.4g "
          "im2col_gflops=%.4g onednn_gflops=%.4g speedup=%.3g auto=%s\n",
          layer.name, d.name, threads, median(im2col.wall), median(onednn.wall), im2col_cpu, onednn_cpu,
          flops / im2col_cpu * threads * 1e-6, flops / onednn_cpu * threads * 1e-6, im2col_cpu / onednn_cpu,
          path_name(kernels::conv2d_path(d.direction, g, false)));
      std::fflush(stdout);
    }
  }
}
