// Interleaved A/B timings, in one process and on the same tensors, of the channels-last BatchNorm passes and the
// channels-last 2x2 max pool: the kernels before and after the row tiles / one-byte taps.
//   BatchNorm: training forward + backward (statistics, affine, gradient sums, dx) over [N*H*W, C] with the
//     per-row kernels (A: kernels::set_row_tiles_min_rows(max)) against the row tiles (B), plus the NCHW passes
//     over [N, C, H*W] as the reference, and BatchNorm1d's [N, C] shapes both ways.
//   Max pool: forward + backward of the general NHWC kernel with int64 indices (A) against the 2x2 one with taps
//     (B), and the NCHW op as the reference.
// Times are thread CPU time per call (median of the rounds), so a loaded machine inflates them less than wall
// time; still, run it quiet for numbers to quote. Usage: batch_norm_rows [--rounds R] [--smoke]
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <tapegrad/framework/kernels/batch_norm_passes.h>
#include <tapegrad/framework/kernels/batch_norm_row_passes.h>
#include <tapegrad/framework/kernels/max_pool_2x2_nhwc.h>
#include <tapegrad/framework/kernels/pool_nhwc.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median CPU ms per call of each function, the functions run in turn, `calls` calls each, for `rounds` rounds.
std::vector<double> interleaved(const std::vector<std::function<void()>>& fns, int rounds, int calls) {
  std::vector<std::vector<double>> times(fns.size());
  for (const auto& f : fns) f();  // warm up
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < fns.size(); ++k) {
      const double t0 = cpu_ms();
      for (int c = 0; c < calls; ++c) fns[k]();
      times[k].push_back((cpu_ms() - t0) / calls);
    }
  std::vector<double> out;
  for (const auto& t : times) out.push_back(median(t));
  return out;
}

// Floats aligned to 64 bytes, as the library's tensors are. Note: a std::vector's 16-byte alignment split every
// 64-byte vector load and store over two cache lines, which slowed the channel-chunked kernels more than the others.
class Floats {
 public:
  explicit Floats(std::int64_t n) : storage_(static_cast<std::size_t>(n) + 16), size_(static_cast<std::size_t>(n)) {}
  float* data() { return align(storage_.data()); }
  const float* data() const { return align(const_cast<float*>(storage_.data())); }
  std::size_t size() const { return size_; }

 private:
  static float* align(float* p) {
    return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
  }
  std::vector<float> storage_;
  std::size_t size_;
};

Floats random_floats(std::int64_t n) {
  const Tensor t = randn({n});
  Floats out(n);
  std::copy(t.data<float>(), t.data<float>() + n, out.data());
  return out;
}

void bn_case(const char* name, std::int64_t rows_n, std::int64_t c, std::int64_t s, int rounds, int calls) {
  const std::int64_t numel = rows_n * c * s;
  const Floats x = random_floats(numel), g = random_floats(numel);
  Floats y(numel), dx(numel);
  const std::vector<double> weight(static_cast<std::size_t>(c), 1.0), bias(static_cast<std::size_t>(c), 0.0);
  std::vector<double> mean(weight.size()), var_sum(weight.size()), invstd(weight.size()), sum_g(weight.size()),
      sum_gxc(weight.size());
  // The layout of the same data as [R, C] (rows) and, for the reference, as NCHW [N, C, S].
  const kernels::BatchNormLayout rows{rows_n * s, c, 1}, nchw{rows_n, c, s};
  const auto step = [&](const kernels::BatchNormLayout& l, bool relu) {
    kernels::batch_norm_train_forward(x.data(), l, weight, bias, 1e-5, y.data(), mean, var_sum, invstd, relu);
    kernels::batch_norm_train_backward(g.data(), x.data(), l, weight, mean, invstd, dx.data(), sum_g, sum_gxc,
                                       relu ? &bias : nullptr);
  };
  const std::int64_t never = std::numeric_limits<std::int64_t>::max();
  const std::int64_t tiles_from = kernels::set_row_tiles_min_rows(never);
  kernels::set_row_tiles_min_rows(tiles_from);
  for (const bool relu : {false, true}) {
    std::vector<std::function<void()>> fns{[&] {
                                             kernels::set_row_tiles_min_rows(never);
                                             step(rows, relu);
                                           },
                                           [&] {
                                             kernels::set_row_tiles_min_rows(tiles_from);
                                             step(rows, relu);
                                           }};
    if (s > 1) {
      fns.push_back([&] { step(nchw, relu); });
      // The forward alone, tiles against NCHW: which half the difference is in.
      fns.push_back([&] {
        kernels::batch_norm_train_forward(x.data(), rows, weight, bias, 1e-5, y.data(), mean, var_sum, invstd, relu);
      });
      fns.push_back([&] {
        kernels::batch_norm_train_forward(x.data(), nchw, weight, bias, 1e-5, y.data(), mean, var_sum, invstd, relu);
      });
    }
    const std::vector<double> ms = interleaved(fns, rounds, calls);
    std::printf("bn %-22s relu=%d  per-row %.3f ms  tiles %.3f ms  speedup %.2fx", name, relu, ms[0], ms[1],
                ms[0] / ms[1]);
    if (s > 1) std::printf("  nchw %.3f ms  (forward: tiles %.3f, nchw %.3f)", ms[2], ms[3], ms[4]);
    std::printf("\n");
  }
  kernels::set_row_tiles_min_rows(tiles_from);
}

void pool_case(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, int rounds, int calls) {
  const std::int64_t oh = h / 2, ow = w / 2;
  const Floats x = random_floats(n * c * h * w), g = random_floats(n * c * oh * ow);
  Floats out(n * c * oh * ow), dx(n * c * h * w);
  std::vector<std::int64_t> indices(g.size());
  std::vector<std::uint8_t> taps(g.size());
  const kernels::NhwcPlanes planes{n, h, w, c, oh, ow};
  std::vector<std::int64_t> first(static_cast<std::size_t>(std::max(oh, ow)), 0), last_h(oh, 2), last_w(ow, 2);
  const kernels::NhwcMaxWindows windows{2, 2, 0, 0, 1, 1, first.data(), last_h.data(), first.data(), last_w.data()};
  const kernels::Nhwc2x2 p{n, h, w, c, oh, ow};
  const Tensor xt = randn({n, c, h, w}), gt = randn({n, c, oh, ow});
  const Tensor x_cl = xt.contiguous(MemoryFormat::ChannelsLast).detach().requires_grad_(true);
  const Tensor x_rows = xt.detach().requires_grad_(true);
  const Tensor gt_cl = gt.contiguous(MemoryFormat::ChannelsLast);
  const std::vector<double> ms = interleaved(
      {[&] {
         kernels::max_pool_nhwc(x.data(), planes, windows, out.data(), indices.data());
         kernels::max_pool_nhwc_backward(g.data(), indices.data(), planes, dx.data());
       },
       [&] {
         kernels::max_pool_2x2_nhwc(x.data(), p, out.data(), taps.data());
         kernels::max_pool_2x2_nhwc_backward(g.data(), taps.data(), p, dx.data());
       },
       [&] { kernels::max_pool_nhwc(x.data(), planes, windows, out.data(), indices.data()); },
       [&] { kernels::max_pool_2x2_nhwc(x.data(), p, out.data(), taps.data()); },
       [&] { autograd::grad({max_pool2d(x_cl, 2)}, {x_cl}, {gt_cl}); },
       [&] { autograd::grad({max_pool2d(x_rows, 2)}, {x_rows}, {gt}); }},
      rounds, calls);
  std::printf("pool [%lld,%lld,%lld,%lld] fwd+bwd  nhwc int64 %.3f ms  nhwc taps %.3f ms  speedup %.2fx  |  ops: "
              "nhwc %.3f ms  nchw %.3f ms\n",
              static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(h),
              static_cast<long long>(w), ms[0], ms[1], ms[0] / ms[1], ms[4], ms[5]);
  std::printf("pool forward only: nhwc int64 %.3f ms  nhwc taps %.3f ms\n", ms[2], ms[3]);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--smoke")) smoke = true;
  }
  if (smoke) rounds = 1;
  set_num_threads(1);
  std::printf("threads 1, rounds %d, median thread CPU ms per call\n", rounds);
  const int calls = smoke ? 1 : 5;
  // cnn_cl's and resnet_cl's BatchNorm2d inputs (batch 64), then BatchNorm1d's [N, C].
  bn_case("cnn [64,32,28,28]", 64, 32, 28 * 28, rounds, calls);
  bn_case("cnn [64,64,14,14]", 64, 64, 14 * 14, rounds, calls);
  bn_case("resnet [64,32,32,32]", 64, 32, 32 * 32, rounds, calls);
  bn_case("resnet [64,64,16,16]", 64, 64, 16 * 16, rounds, calls);
  bn_case("resnet [64,128,8,8]", 64, 128, 8 * 8, rounds, calls);
  bn_case("1d [64,512]", 64, 512, 1, rounds, calls * 20);
  bn_case("1d [64,64]", 64, 64, 1, rounds, calls * 40);
  bn_case("1d [256,512]", 256, 512, 1, rounds, calls * 10);
  bn_case("1d [1024,512]", 1024, 512, 1, rounds, calls * 4);
  pool_case(64, 32, 28, 28, rounds, calls);
  pool_case(64, 64, 14, 14, rounds, calls);
  return 0;
}
