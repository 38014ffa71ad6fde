// libtorch's half of the side-by-side comparison (bench/compare.cpp is tapegrad's, with the same workloads
// line for line, the same options and the same output; see there for the list). Built only when libtorch is
// found; the tapegrad library never links it.
//   compare_torch [--threads N] [--seconds S] [--workload NAME] [--smoke]
// Note: Debian's libtorch calls whatever libblas.so.3 resolves to: the netlib reference BLAS unless told
// otherwise, which makes its Linear layers ~20x slower. Run it with
// LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (bench/compare.sh does) so the comparison is
// against OpenBLAS.
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace {


struct Settings {
  int threads = 1;
  double seconds = 3.0;
  std::string workload;  // empty: all
  bool smoke = false;
};

/// Runs `step` for a warm-up and then for `settings.seconds`, and prints the workload's line.
void measure(const Settings& settings, const std::string& name, double samples_per_step,
             const std::function<void()>& step, double flops_per_step = 0.0) {
  using Clock = std::chrono::steady_clock;
  // Note: process CPU time as well as wall time: on a shared machine a 1-thread run's wall time also counts
  // the time other processes held the core; its CPU time does not (at 2 threads it sums both threads).
  const auto cpu_seconds = [] {
    timespec time{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
    return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_nsec) * 1e-9;
  };
  const int warmup_steps = settings.smoke ? 1 : 3;
  for (int i = 0; i < warmup_steps; ++i) step();
  // Note: minor page faults per step show a step that still gets fresh memory from the kernel each time.
  const auto minor_faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_minflt);
  };
  const double faults_start = minor_faults();
  const auto start = Clock::now();
  const double cpu_start = cpu_seconds();
  long steps = 0;
  double elapsed = 0.0;
  do {
    step();
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (settings.smoke ? steps < 1 : elapsed < settings.seconds);
  const double seconds_per_step = elapsed / static_cast<double>(steps);
  const double cpu_seconds_per_step = (cpu_seconds() - cpu_start) / static_cast<double>(steps);
  std::printf("workload=%s threads=%d samples_per_s=%.6g ms_per_step=%.6g", name.c_str(), settings.threads,
              samples_per_step / seconds_per_step, seconds_per_step * 1e3);
  if (flops_per_step > 0) std::printf(" gflops=%.6g", flops_per_step / seconds_per_step * 1e-9);
  std::printf(" cpu_ms_per_step=%.6g minor_faults_per_step=%.4g\n", cpu_seconds_per_step * 1e3,
              (minor_faults() - faults_start) / static_cast<double>(steps));
  std::fflush(stdout);
}

// Note: tapegrad's zero_grad() sets grads to none (PyTorch 2.x's default); libtorch 1.13's zeroes them. Both
// sides do the same work per step: grads set to none.
void zero_grad_to_none(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params()) parameter.mutable_grad() = torch::Tensor();
}

torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(784, 512), torch::nn::BatchNorm1d(512), torch::nn::ReLU(),
                               torch::nn::Linear(512, 512), torch::nn::BatchNorm1d(512), torch::nn::ReLU(),
                               torch::nn::Linear(512, 10));
}

torch::nn::Sequential make_cnn() {
  return torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)), torch::nn::BatchNorm2d(32),
      torch::nn::ReLU(), torch::nn::MaxPool2d(2),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)), torch::nn::BatchNorm2d(64),
      torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(3136, 128),
      torch::nn::ReLU(), torch::nn::Linear(128, 10));
}

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      shortcut = register_module("shortcut", torch::nn::Sequential(
                                                 torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                                 torch::nn::BatchNorm2d(out)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = bn2->forward(conv2->forward(torch::relu(bn1->forward(conv1->forward(x)))));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

struct GlobalAveragePoolImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) { return x.mean({2, 3}); }
};
TORCH_MODULE(GlobalAveragePool);

torch::nn::Sequential make_resnet() {
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1).bias(false)),
                              torch::nn::BatchNorm2d(32), torch::nn::ReLU());
  std::int64_t in = 32;
  for (std::int64_t width : {32, 64, 128, 256}) {
    model->push_back(BasicBlock(in, width, width == 32 ? 1 : 2));
    model->push_back(BasicBlock(width, width, 1));
    in = width;
  }
  model->push_back(GlobalAveragePool());
  model->push_back(torch::nn::Linear(256, 10));
  return model;
}

// The lstm workloads' model: input [T, B, 28] (time-major, PyTorch's default) -> logits [B, 10] from the last step.
struct LSTMClassifierImpl : torch::nn::Module {
  LSTMClassifierImpl() {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(28, 256).num_layers(2)));
    head = register_module("head", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(std::get<0>(lstm->forward(x)).select(0, x.size(0) - 1)); }
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(LSTMClassifier);

// The transformer workload's model: tokens [T, B] (time-major, as libtorch's TransformerEncoder) -> logits [T, B, 96].
// Note: libtorch 1.13's C++ TransformerEncoderLayer has PyTorch's defaults that tapegrad's workload uses
// (ReLU, post-norm, dropout 0.1, sequence-first), and the same init scheme: xavier_uniform_ in_proj, zero
// in_proj/out_proj biases, Linear's kaiming_uniform_(a = sqrt(5)), Embedding N(0, 1).
struct CausalLMImpl : torch::nn::Module {
  CausalLMImpl(std::int64_t vocabulary, std::int64_t length) {
    const std::int64_t d_model = 256;
    embed = register_module("embed", torch::nn::Embedding(vocabulary, d_model));
    position = register_module("position", torch::nn::Embedding(length, d_model));
    const torch::nn::TransformerEncoderLayer layer(
        torch::nn::TransformerEncoderLayerOptions(d_model, 8).dim_feedforward(1024).dropout(0.1));
    encoder = register_module("encoder", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(layer, 4)));
    head = register_module("head", torch::nn::Linear(d_model, vocabulary));
    mask = torch::nn::TransformerImpl::generate_square_subsequent_mask(length);
    positions = torch::arange(length, torch::kLong).unsqueeze(1);
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    const torch::Tensor x = embed->forward(tokens) + position->forward(positions);
    return head->forward(encoder->forward(x, mask));
  }
  torch::nn::Embedding embed{nullptr}, position{nullptr};
  torch::nn::TransformerEncoder encoder{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor mask, positions;
};
TORCH_MODULE(CausalLM);

// One training step per measured step: grads set to none, forward, cross-entropy, backward, optimizer step.
template <class Model>
void measure_training(const Settings& settings, const std::string& name, Model& model, torch::optim::Optimizer& optimizer,
                      const torch::Tensor& input, const torch::Tensor& labels) {
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    zero_grad_to_none(optimizer);
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(input), labels);
    loss.backward();
    optimizer.step();
  });
}

void run_resnet(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training(settings, "resnet", model, optimizer, torch::randn({batch, 3, 32, 32}),
                   torch::randint(0, 10, {batch}, torch::kLong));
}

void run_mlp(const Settings& settings) {
  const std::int64_t batch = 128;
  auto model = make_mlp();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training(settings, "mlp", model, optimizer, torch::randn({batch, 784}),
                   torch::randint(0, 10, {batch}, torch::kLong));
}

void run_cnn(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  measure_training(settings, "cnn", model, optimizer, torch::randn({batch, 1, 28, 28}),
                   torch::randint(0, 10, {batch}, torch::kLong));
}

void run_lstm(const Settings& settings) {
  const std::int64_t batch = 128, steps = 28;
  LSTMClassifier model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor input = torch::randn({steps, batch, 28}), labels = torch::randint(0, 10, {batch}, torch::kLong);
  measure_training(settings, "lstm", model, optimizer, input, labels);
}

void run_transformer(const Settings& settings) {
  const std::int64_t batch = 32, length = 128, vocabulary = 96;
  CausalLM model(vocabulary, length);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const torch::Tensor tokens = torch::randint(0, vocabulary, {length, batch}, torch::kLong),
                      targets = torch::randint(0, vocabulary, {length * batch}, torch::kLong);
  measure(settings, "transformer", static_cast<double>(batch), [&] {
    zero_grad_to_none(optimizer);
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(tokens).reshape({length * batch, vocabulary}), targets);
    loss.backward();
    optimizer.step();
  });
}

void run_lstm_infer_b1(const Settings& settings) {
  LSTMClassifier model;
  model->eval();
  const torch::Tensor input = torch::randn({28, 1, 28});
  c10::InferenceMode inference_mode;
  torch::Tensor output;
  measure(settings, "lstm_infer_b1", 1, [&] { output = model->forward(input); });
}

void run_bn_fwd_bwd(const Settings& settings) {
  torch::nn::BatchNorm2d norm(64);
  torch::Tensor input = torch::randn({64, 64, 28, 28}).requires_grad_();
  torch::Tensor output_grad = torch::randn({64, 64, 28, 28});
  measure(settings, "bn_fwd_bwd", 64, [&] {
    input.mutable_grad() = torch::Tensor();
    for (torch::Tensor& parameter : norm->parameters()) parameter.mutable_grad() = torch::Tensor();
    norm->forward(input).backward(output_grad);
  });
}

void run_infer_mlp(const Settings& settings, std::int64_t batch) {
  auto model = make_mlp();
  model->eval();
  torch::Tensor input = torch::randn({batch, 784});
  // Note: InferenceMode, libtorch's fastest inference setting (no version counters, no view tracking).
  c10::InferenceMode inference_mode;
  torch::Tensor output;
  measure(settings, "infer_mlp_b" + std::to_string(batch), static_cast<double>(batch),
          [&] { output = model->forward(input); });
}

void run_matmul(const Settings& settings) {
  const std::int64_t n = 1024;
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c;
  measure(settings, "matmul", 1, [&] { c = torch::matmul(a, b); }, 2.0 * n * n * n);
}

int usage(const char* program) {
  std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--workload NAME] [--smoke]\n", program);
  return 2;
}

#include "compare_autocast_torch.h"  // NOLINT: workloads matmul_bf16, mlp_bf16, cnn_bf16, resnet_bf16 (inside this namespace)
#include "compare_channels_last_torch.h"  // NOLINT: workloads cnn_cl, resnet_cl, cnn_bf16_cl, resnet_bf16_cl (after the autocast half: TorchAutocast) (inside this namespace)

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      settings.threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      settings.seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--workload") == 0 && i + 1 < argc) {
      settings.workload = argv[++i];
    } else if (std::strcmp(argv[i], "--smoke") == 0) {
      settings.smoke = true;
    } else {
      return usage(argv[0]);
    }
  }
  if (settings.threads < 1) return usage(argv[0]);
  torch::set_num_threads(settings.threads);
  // Note: which kernels the BLAS under libtorch picked (OpenBLAS reports its core; absent for another BLAS).
  if (auto corename = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename")))
    std::printf("openblas_core=%s\n", corename());
  torch::manual_seed(0);
  const std::pair<const char*, std::function<void()>> workloads[] = {
      {"mlp", [&] { run_mlp(settings); }},
      {"cnn", [&] { run_cnn(settings); }},
      {"bn_fwd_bwd", [&] { run_bn_fwd_bwd(settings); }},
      {"infer_mlp_b1", [&] { run_infer_mlp(settings, 1); }},
      {"infer_mlp_b1024", [&] { run_infer_mlp(settings, 1024); }},
      {"matmul", [&] { run_matmul(settings); }},
      {"resnet", [&] { run_resnet(settings); }},
      {"cnn_cl", [&] { run_cnn_cl(settings); }},
      {"resnet_cl", [&] { run_resnet_cl(settings); }},
      {"matmul_bf16", [&] { run_matmul_bf16(settings); }},
      {"mlp_bf16", [&] { run_mlp_bf16(settings); }},
      {"cnn_bf16", [&] { run_cnn_bf16(settings); }},
      {"resnet_bf16", [&] { run_resnet_bf16(settings); }},
      {"cnn_bf16_cl", [&] { run_cnn_bf16_cl(settings); }},
      {"resnet_bf16_cl", [&] { run_resnet_bf16_cl(settings); }},
      {"lstm", [&] { run_lstm(settings); }},
      {"lstm_infer_b1", [&] { run_lstm_infer_b1(settings); }},
      {"transformer", [&] { run_transformer(settings); }},
      {"idle", [] {}},  // nothing: the process's own resident memory, the baseline for max_rss_mb
  };
  bool ran = false;
  for (const auto& [name, run] : workloads) {
    if (!settings.workload.empty() && settings.workload != name) continue;
    run();
    ran = true;
  }
  if (!ran) {
    std::fprintf(stderr, "unknown workload '%s'\n", settings.workload.c_str());
    return 2;
  }
  rusage usage_info{};
  getrusage(RUSAGE_SELF, &usage_info);
  std::printf("max_rss_mb=%.1f\n", static_cast<double>(usage_info.ru_maxrss) / 1024.0);
  return 0;
}
