// tapegrad's side of the inference-latency comparison with ONNX Runtime (bench/onnx_latency.sh runs both; issue 41,
// item 6). One workload, batch and thread count per process: the model in eval mode under NoGradGuard on one fixed
// random batch, a warm-up, then forward calls, each timed alone, until --seconds have passed; prints one line
//   workload=cnn batch=1 threads=1 side=tapegrad runs=... median_ms=... min_ms=... max_ms=...
// With --export PREFIX it also writes PREFIX.onnx (export_onnx, the same weights, BatchNorm kept as
// BatchNormalization nodes) and PREFIX.tgt (the same input batch, as tests/onnx/run_model.js reads it), which the
// script then times in ONNX Runtime.
//   onnx_latency --workload mlp|cnn|tiny --batch N [--threads T] [--seconds S] [--export PREFIX] [--smoke]
// Workloads: mlp and cnn are bench/compare.cpp's models (mlp: Linear(784,512)-BN1d-ReLU-Linear(512,512)-BN1d-ReLU-
// Linear(512,10) on [N, 784]; cnn: (Conv3x3-BN2d-ReLU-MaxPool2) x 2, Linear(3136,128)-ReLU-Linear(128,10) on
// [N, 1, 28, 28]); tiny is one ReLU on [N, 1], whose time is each runtime's fixed cost per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/tapegrad.h>

#include "support/onnx_runtime.h"

using namespace tapegrad;

namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::BatchNorm1d>(512),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 512),
      std::make_shared<nn::BatchNorm1d>(512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 10)});
}

std::shared_ptr<nn::Sequential> make_cnn() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 32, 3}.with_padding(1)),
      std::make_shared<nn::BatchNorm2d>(32), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{32, 64, 3}.with_padding(1)),
      std::make_shared<nn::BatchNorm2d>(64), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10)});
}

// Running statistics away from their initial 0 / 1, so that BatchNorm's eval form does real work on both sides.
void randomise_statistics(nn::Module& model) {
  NoGradGuard no_grad;
  for (auto& [name, t] : model.state()) {
    Tensor target = t;
    if (name.ends_with("running_mean")) target.copy_(randn(t.shape()).mul_(0.1));
    if (name.ends_with("running_var")) target.copy_(rand(t.shape()).add_(0.5));
  }
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "onnx_latency: %s\nusage: onnx_latency --workload mlp|cnn|tiny --batch N [--threads T] "
                       "[--seconds S] [--export PREFIX] [--smoke]\n", why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string workload = "mlp", export_prefix;
  std::int64_t batch = 1;
  int threads = 1;
  double seconds = 3;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--workload") workload = value();
    else if (arg == "--batch") batch = std::stoll(value());
    else if (arg == "--threads") threads = std::stoi(value());
    else if (arg == "--seconds") seconds = std::stod(value());
    else if (arg == "--export") export_prefix = value();
    else if (arg == "--smoke") smoke = true;
    else usage("unknown argument '" + arg + "'");
  }
  if (smoke) {
    // CI's bench smoke run: each workload briefly, and one export (no Node involved).
    for (const char* w : {"tiny", "mlp", "cnn"}) {
      const std::string prefix = (std::filesystem::temp_directory_path() / "tapegrad_onnx_latency_smoke").string();
      const std::string self = argv[0];
      const std::string command = fmt::format("'{}' --workload {} --batch 2 --seconds 0.01 --export '{}'", self, w, prefix);
      if (std::system(command.c_str()) != 0) return 1;
      std::filesystem::remove(prefix + ".onnx");
      std::filesystem::remove(prefix + ".tgt");
    }
    return 0;
  }
  if (batch < 1 || threads < 1 || seconds <= 0) usage("--batch, --threads and --seconds must be positive");
  set_num_threads(threads);
  manual_seed(0);

  std::shared_ptr<nn::Module> model;
  Tensor input;
  if (workload == "mlp") {
    model = make_mlp();
    input = randn({batch, 784});
  } else if (workload == "cnn") {
    model = make_cnn();
    input = randn({batch, 1, 28, 28});
  } else if (workload == "tiny") {
    model = std::make_shared<nn::ReLU>();
    input = randn({batch, 1});
  } else {
    usage("unknown workload '" + workload + "'");
  }
  randomise_statistics(*model);
  model->eval();

  if (!export_prefix.empty()) {
    onnx::ExportOptions options;
    options.input_names = {"input"};
    onnx::export_onnx(*model, {input}, export_prefix + ".onnx", options);
    testing::write_tensor_file(export_prefix + ".tgt", {{"input", input}});
  }

  NoGradGuard no_grad;
  Tensor output;
  for (int i = 0; i < 10; ++i) output = model->forward(input);
  std::vector<double> times;
  const double end = now_ms() + seconds * 1e3;
  do {
    const double start = now_ms();
    output = model->forward(input);
    times.push_back(now_ms() - start);
  } while (now_ms() < end);
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  const double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  fmt::print("workload={} batch={} threads={} side=tapegrad runs={} median_ms={:.5f} min_ms={:.5f} max_ms={:.5f}\n",
             workload, batch, threads, n, median, times.front(), times.back());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "onnx_latency: %s\n", error.what());
  return 1;
}
