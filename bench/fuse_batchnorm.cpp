// Eval throughput of a Conv-BN-ReLU CNN before and after nn::fuse_batchnorm, float32, under NoGradGuard.
//   fuse_batchnorm [--threads N] [--seconds S] [--batch B] [--smoke]
// Model (the Fashion-MNIST CNN's shape): Conv(1,32,3,p1)-BN2d-ReLU-MaxPool2-Conv(32,64,3,p1)-BN2d-ReLU-MaxPool2-
// Flatten-Linear(3136,128)-BN1d-ReLU-Linear(128,10), with running statistics from a few training batches.
// Input: one fixed random batch [B, 1, 28, 28] (default B = 256), so only the forward is timed.
// Rounds alternate unfused and fused forwards (so machine load hits both alike) until --seconds (default 4) of
// total time; prints per variant images_per_s and ms_per_batch (median over rounds, wall time) and the speedup,
// plus max_abs_difference between the two outputs.
// --smoke (CI's bench_smoke) runs one forward of each and checks the outputs agree: it checks that it runs.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;

double now_seconds() {
  timespec time{};
  clock_gettime(CLOCK_MONOTONIC, &time);
  return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_nsec) * 1e-9;
}

std::shared_ptr<nn::Sequential> make_cnn() {
  using nn::Conv2dOptions;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(Conv2dOptions{1, 32, 3}.with_padding(1)), std::make_shared<nn::BatchNorm2d>(32),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(Conv2dOptions{32, 64, 3}.with_padding(1)), std::make_shared<nn::BatchNorm2d>(64),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(64 * 7 * 7, 128), std::make_shared<nn::BatchNorm1d>(128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10)});
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int usage(const char* program) {
  std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--batch B] [--smoke]\n", program);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  double seconds = 4.0;
  std::int64_t batch = 256;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--threads") == 0 && has_value) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--seconds") == 0 && has_value) seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0 && has_value) batch = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--smoke") == 0) smoke = true;
    else return usage(argv[0]);
  }
  if (threads < 1 || batch < 1 || !(seconds > 0)) return usage(argv[0]);
  if (smoke) batch = 8;
  set_num_threads(threads);

  manual_seed(0);
  auto model = make_cnn();
  for (int step = 0; step < 3; ++step) (*model)(randn({32, 1, 28, 28}));  // running statistics away from 0 and 1
  model->eval();
  auto fused = nn::fuse_batchnorm(*model);
  const Tensor input = randn({batch, 1, 28, 28});

  NoGradGuard no_grad;
  const double difference = max(abs((*fused)(input) - (*model)(input))).item();
  if (!(difference < 1e-3)) {
    std::fprintf(stderr, "fuse_batchnorm: fused and unfused outputs differ by %g\n", difference);
    return 1;
  }
  if (smoke) {
    std::printf("smoke: one forward each, max_abs_difference=%.3g\n", difference);
    return 0;
  }
  std::vector<double> unfused_times, fused_times;
  const double start = now_seconds();
  while (now_seconds() - start < seconds || unfused_times.size() < 3) {
    for (int variant = 0; variant < 2; ++variant) {
      nn::Module& m = variant == 0 ? static_cast<nn::Module&>(*model) : *fused;
      const double t0 = now_seconds();
      const Tensor out = m(input);
      (variant == 0 ? unfused_times : fused_times).push_back(now_seconds() - t0);
      if (out.numel() != batch * 10) return 1;
    }
  }
  const double unfused = median(unfused_times), fused_time = median(fused_times);
  std::printf("threads=%d batch=%lld rounds=%zu\n", threads, static_cast<long long>(batch), unfused_times.size());
  std::printf("variant=unfused images_per_s=%.0f ms_per_batch=%.2f\n", static_cast<double>(batch) / unfused,
              unfused * 1e3);
  std::printf("variant=fused   images_per_s=%.0f ms_per_batch=%.2f\n", static_cast<double>(batch) / fused_time,
              fused_time * 1e3);
  std::printf("speedup=%.3f max_abs_difference=%.3g\n", unfused / fused_time, difference);
  return 0;
}
