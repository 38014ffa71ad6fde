// What tapegrad's NCHW tensors cost its oneDNN convolutions, and what a channels-last layout would win: each
// float32 3x3 layer of bench/compare's cnn and resnet at batch 64, every direction, run by oneDNN directly as
//   blocked    the direct primitive on the blocked layout oneDNN picks (nChw16c on AVX-512), operands already
//              in it: the kernel alone;
//   tapegrad   the same primitive plus the reorders tapegrad pays around it today (its tensors are NCHW):
//              each activation operand into the blocked layout (grad_output once, for backward-data: the
//              weight gradient reuses it), the activation result back to NCHW;
//   nhwc       the direct primitive with every activation in NHWC (channels last), which a strided tensor can
//              hold, so no reorder at all.
// Forward also times oneDNN's Winograd algorithm and prints its largest error against the direct result,
// relative to the largest output: why tapegrad does not use it (docs/performance.md).
//   conv_layouts [--threads N] [--rounds R] [--smoke]
// Rounds interleave the variants; each prints the median of R rounds, a round timing 20 calls after one warm-up.
// nhwc_gflops counts every multiply-add of the 3x3 windows, padding included (as bench/compare counts them), so
// on the small ResNet planes it can exceed what the FMA units did.
// Calls oneDNN directly (like bench/anchors); no tapegrad code runs.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;

struct Layer {
  const char* name;
  memory::dim channels, size, out_channels, stride;
};

// bench/compare's float32 3x3 convolutions past the first (the 1- and 3-channel stems take im2col in tapegrad).
const Layer layers[] = {
    {"cnn_conv2", 32, 14, 64, 1},      {"resnet_s1", 32, 32, 32, 1}, {"resnet_s2_down", 32, 32, 64, 2},
    {"resnet_s2", 64, 16, 64, 1},      {"resnet_s3", 128, 8, 128, 1}, {"resnet_s4", 256, 4, 256, 1},
};
constexpr memory::dim kBatch = 64;

dnnl::engine engine(dnnl::engine::kind::cpu, 0);
dnnl::stream stream(engine);

memory filled(const memory::desc& desc, unsigned seed) {
  memory m(desc, engine);
  float* p = static_cast<float*>(m.get_data_handle());
  const std::size_t count = desc.get_size() / sizeof(float);
  for (std::size_t i = 0; i < count; ++i)
    p[i] = static_cast<float>((i * 2654435761u + seed) % 2001) / 1000.0f - 1.0f;
  return m;
}

// One way of running a direction: primitives executed in order, each with its arguments.
struct Run {
  std::vector<std::pair<dnnl::primitive, Args>> steps;
  void operator()() {
    for (auto& [primitive, args] : steps) primitive.execute(stream, args);
    stream.wait();
  }
};

// The reorder of `from` into `to_memory` as a step (none when their layouts match).
void add_reorder(Run& run, const memory& from, const memory& to_memory) {
  if (from.get_desc() == to_memory.get_desc()) return;
  run.steps.push_back({dnnl::reorder(from, to_memory), Args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to_memory}}});
}

struct Shapes {
  memory::dims src, weights, dst, strides, padding;
  explicit Shapes(const Layer& l)
      : src{kBatch, l.channels, l.size, l.size},
        weights{l.out_channels, l.channels, 3, 3},
        dst{kBatch, l.out_channels, l.size / l.stride, l.size / l.stride},
        strides{l.stride, l.stride},
        padding{1, 1} {}
};

memory::desc desc(const memory::dims& dims, Tag tag) { return {dims, memory::data_type::f32, tag}; }

dnnl::convolution_forward::primitive_desc forward_pd(const Shapes& s, Tag activations, dnnl::algorithm algorithm) {
  return {{dnnl::prop_kind::forward_training, algorithm, desc(s.src, activations), desc(s.weights, Tag::any),
           desc(s.dst, activations), s.strides, s.padding, s.padding},
          engine};
}

// A backward primitive's description (backward-data and backward-weights take the same arguments), the forward
// one as oneDNN's hint.
template <class Primitive>
typename Primitive::primitive_desc backward_pd(const Shapes& s, Tag activations,
                                               const dnnl::convolution_forward::primitive_desc& hint) {
  return {typename Primitive::desc(dnnl::algorithm::convolution_direct, desc(s.src, activations),
                                   desc(s.weights, Tag::any), desc(s.dst, activations), s.strides, s.padding,
                                   s.padding),
          engine, hint};
}

enum class Direction { forward, input_grad, weight_grad };

// One direction with its activations in `activations` (any: oneDNN's blocked choice); `with_reorders` adds the
// reorders from and to NCHW user memory that tapegrad pays for the activations (the weights' small reorders are
// left out of every variant).
Run make_run(const Shapes& s, Direction direction, Tag activations, bool with_reorders) {
  const auto fwd = forward_pd(s, activations, dnnl::algorithm::convolution_direct);
  Run run;
  // User memory in NCHW (what tapegrad holds), reordered into the primitive's layout when asked.
  auto input = [&](const memory::desc& inner, const memory::dims& dims, unsigned seed) {
    memory inner_memory = filled(inner, seed);
    if (with_reorders) add_reorder(run, filled(desc(dims, Tag::nchw), seed), inner_memory);
    return inner_memory;
  };
  memory result;
  memory::dims result_dims;
  switch (direction) {
    case Direction::forward: {
      Args args{{DNNL_ARG_SRC, input(fwd.src_desc(), s.src, 1)},
                {DNNL_ARG_WEIGHTS, filled(fwd.weights_desc(), 2)},
                {DNNL_ARG_DST, result = memory(fwd.dst_desc(), engine)}};
      run.steps.push_back({dnnl::convolution_forward(fwd), args});
      result_dims = s.dst;
      break;
    }
    case Direction::input_grad: {
      const auto pd = backward_pd<dnnl::convolution_backward_data>(s, activations, fwd);
      Args args{{DNNL_ARG_DIFF_DST, input(pd.diff_dst_desc(), s.dst, 3)},
                {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), 2)},
                {DNNL_ARG_DIFF_SRC, result = memory(pd.diff_src_desc(), engine)}};
      run.steps.push_back({dnnl::convolution_backward_data(pd), args});
      result_dims = s.src;
      break;
    }
    case Direction::weight_grad: {
      const auto pd = backward_pd<dnnl::convolution_backward_weights>(s, activations, fwd);
      // Note: tapegrad reorders grad_output once for backward-data and backward-weights (kernels/conv2d_onednn's
      // ReorderedInputs), so only the input's reorder is counted here.
      Args args{{DNNL_ARG_SRC, input(pd.src_desc(), s.src, 1)},
                {DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc(), 3)},
                {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), engine)}};
      run.steps.push_back({dnnl::convolution_backward_weights(pd), args});
      break;
    }
  }
  // The activation result goes back to NCHW (the weight gradient, small, is left in oneDNN's layout).
  if (with_reorders && result) add_reorder(run, result, memory(desc(result_dims, Tag::nchw), engine));
  return run;
}

double milliseconds(Run& run, int calls) {
  run();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / calls;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Winograd's forward against the direct one on the same inputs: max |difference| / max |direct|.
double winograd_error(const Shapes& s) {
  const auto direct = forward_pd(s, Tag::nchw, dnnl::algorithm::convolution_direct);
  const auto winograd = forward_pd(s, Tag::any, dnnl::algorithm::convolution_winograd);
  memory src = filled(desc(s.src, Tag::nchw), 1), weights = filled(desc(s.weights, Tag::oihw), 2);
  auto compute = [&](const dnnl::convolution_forward::primitive_desc& pd) {
    memory inner_src(pd.src_desc(), engine), inner_weights(pd.weights_desc(), engine), dst(pd.dst_desc(), engine);
    memory plain(desc(s.dst, Tag::nchw), engine);
    dnnl::reorder(src, inner_src).execute(stream, src, inner_src);
    dnnl::reorder(weights, inner_weights).execute(stream, weights, inner_weights);
    dnnl::convolution_forward(pd).execute(
        stream, {{DNNL_ARG_SRC, inner_src}, {DNNL_ARG_WEIGHTS, inner_weights}, {DNNL_ARG_DST, dst}});
    dnnl::reorder(dst, plain).execute(stream, dst, plain);
    stream.wait();
    const float* p = static_cast<const float*>(plain.get_data_handle());
    return std::vector<float>(p, p + plain.get_desc().get_size() / sizeof(float));
  };
  const std::vector<float> a = compute(direct), b = compute(winograd);
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, static_cast<double>(std::fabs(a[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return worst / largest;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), rounds = 7, calls = 20;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--smoke") {
      smoke = true;
    } else {
      std::fprintf(stderr, "usage: conv_layouts [--threads N] [--rounds R] [--smoke]\n");
      return 2;
    }
  }
  if (threads < 1 || rounds < 1) {
    std::fprintf(stderr, "conv_layouts: --threads and --rounds must be at least 1\n");
    return 2;
  }
  if (smoke) rounds = 1, calls = 1;
  omp_set_num_threads(threads);
  const char* names[] = {"forward", "input_grad", "weight_grad"};
  for (const Layer& layer : layers) {
    const Shapes s(layer);
    const double gflop = 2.0 * kBatch * layer.channels * layer.out_channels * 9 * s.dst[2] * s.dst[3] * 1e-9;
    for (int d = 0; d < 3; ++d) {
      const auto direction = static_cast<Direction>(d);
      std::vector<Run> runs = {make_run(s, direction, Tag::any, false), make_run(s, direction, Tag::any, true),
                               make_run(s, direction, Tag::nhwc, false)};
      const bool winograd = direction == Direction::forward && layer.stride == 1;
      if (winograd) {
        const auto pd = forward_pd(s, Tag::any, dnnl::algorithm::convolution_winograd);
        Run run;
        run.steps.push_back({dnnl::convolution_forward(pd), Args{{DNNL_ARG_SRC, filled(pd.src_desc(), 1)},
                                                                 {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), 2)},
                                                                 {DNNL_ARG_DST, memory(pd.dst_desc(), engine)}}});
        runs.push_back(run);
      }
      std::vector<std::vector<double>> times(runs.size());
      for (int r = 0; r < rounds; ++r)
        for (std::size_t v = 0; v < runs.size(); ++v) times[v].push_back(milliseconds(runs[v], calls));
      const double blocked = median(times[0]), tapegrad = median(times[1]), nhwc = median(times[2]);
      std::printf("layer=%s op=%s threads=%d blocked_ms=%.4g tapegrad_ms=%.4g nhwc_ms=%.4g nhwc_gflops=%.4g "
                  "tapegrad_over_nhwc=%.3g",
                  layer.name, names[d], threads, blocked, tapegrad, nhwc, gflop / nhwc * 1e3, tapegrad / nhwc);
      if (winograd) std::printf(" winograd_ms=%.4g winograd_rel_error=%.2g", median(times[3]), winograd_error(s));
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
