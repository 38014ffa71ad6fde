// tapegrad's half of the side-by-side comparison with libtorch (bench/compare_torch.cpp is the other half,
// with the same workloads line for line; bench/compare.sh runs both interleaved and prints the ratio table).
//   compare [--threads N] [--seconds S] [--workload NAME] [--smoke]
// Workloads (float32; a training step is forward + loss + backward + optimizer step; data is one fixed
// random batch, so only the framework is timed):
//   mlp            Linear(784,512)-BN1d-ReLU-Linear(512,512)-BN1d-ReLU-Linear(512,10), cross-entropy,
//                  SGD momentum 0.9, batch 128
//   cnn            Conv(1,32,3,p1)-BN2d-ReLU-MaxPool2-Conv(32,64,3,p1)-BN2d-ReLU-MaxPool2-Flatten-
//                  Linear(3136,128)-ReLU-Linear(128,10), cross-entropy, Adam, batch 64
//   bn_fwd_bwd     BatchNorm2d(64) training forward + backward on [64,64,28,28]
//   infer_mlp_b1   the mlp in eval mode under NoGradGuard, batch 1 (ms_per_step = ms per sample)
//   infer_mlp_b1024  the same, batch 1024
//   matmul         1024x1024 @ 1024x1024 (also prints gflops)
//   resnet         a ResNet-18-style stack at half width on 3x32x32: conv3x3(3,32)-BN-ReLU, then 4 stages of
//                  2 basic blocks (conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU) with 32, 64, 128, 256
//                  channels, stride 2 and a 1x1 conv-BN shortcut entering stages 2-4; global average pool,
//                  Linear(256,10); cross-entropy, SGD momentum 0.9, batch 64
//   lstm           a 2-layer LSTM(28, 256) over a Fashion-MNIST-shaped sequence ([28 steps, batch, 28 features]),
//                  Linear(256,10) on the last step's output, cross-entropy, Adam, batch 128
//   lstm_infer_b1  the same model under NoGradGuard, one sequence (ms_per_step = latency)
//   transformer    a causal language model over [128 steps, batch 32] tokens of a 96-symbol vocabulary:
//                  Embedding(96,256) + a learned positional Embedding(128,256), a 4-layer TransformerEncoder
//                  (d_model 256, 8 heads, feed-forward 1024, ReLU, post-norm, dropout 0.1 everywhere: PyTorch's
//                  defaults) with the causal additive mask, Linear(256,96) head, cross-entropy over all
//                  128 x 32 positions, AdamW (lr 1e-3, weight decay 0.01), batch 32 (samples = sequences)
//   cnn_cl, resnet_cl  cnn and resnet channels-last (model->to(ChannelsLast), batch converted in each step;
//                  bench/compare_channels_last.h)
//   matmul_bf16, mlp_bf16, cnn_bf16, resnet_bf16  matmul, mlp, cnn and resnet with the forward and loss under
//                  AutocastGuard (bfloat16 products; bench/compare_autocast.h)
//   cnn_bf16_cl, resnet_bf16_cl  cnn_cl and resnet_cl with the forward and loss under AutocastGuard
//   idle           nothing (its max_rss_mb is the process's baseline: the libraries loaded, no work)
// Each runs a short warm-up, then steps until --seconds (default 3) have passed, and prints
//   workload=<name> threads=<n> samples_per_s=<x> ms_per_step=<y> [gflops=<g>] cpu_ms_per_step=<z>
//     minor_faults_per_step=<f>
//   minor_faults_per_step=<f>
// and at the end max_rss_mb=<m> (the process's peak resident set, from getrusage).
// --smoke runs two steps of each workload (what CI's bench_smoke does): it checks that they run, not speed.
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <tapegrad/tapegrad.h>

namespace {

using namespace tapegrad;

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

// conv3x3-BN-ReLU-conv3x3-BN plus the shortcut (identity, or 1x1 conv-BN when the shape changes), ReLU.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride) : Module("BasicBlock") {
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(
                                          nn::Conv2dOptions{in, out, 3}.with_stride(stride).with_padding(1).with_bias(false)));
    bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions{out, out, 3}.with_padding(1).with_bias(false)));
    bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out)
      shortcut_ = register_module("shortcut", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                                  std::make_shared<nn::Conv2d>(nn::Conv2dOptions{in, out, 1}.with_stride(stride).with_bias(false)),
                                                  std::make_shared<nn::BatchNorm2d>(out)}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = bn2_->forward(conv2_->forward(relu(bn1_->forward(conv1_->forward(x)))));
    return relu(add(y, shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> shortcut_;
};

class GlobalAveragePool : public nn::Module {
 public:
  GlobalAveragePool() : Module("GlobalAveragePool") {}
  Tensor forward(const Tensor& x) override { return mean(x, {2, 3}); }
};

std::shared_ptr<nn::Sequential> make_resnet() {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{3, 32, 3}.with_padding(1).with_bias(false)),
      std::make_shared<nn::BatchNorm2d>(32), std::make_shared<nn::ReLU>()});
  std::int64_t in = 32;
  for (std::int64_t width : {32, 64, 128, 256}) {
    model->push_back(std::make_shared<BasicBlock>(in, width, width == 32 ? 1 : 2));
    model->push_back(std::make_shared<BasicBlock>(width, width, 1));
    in = width;
  }
  model->push_back(std::make_shared<GlobalAveragePool>());
  model->push_back(std::make_shared<nn::Linear>(256, 10));
  return model;
}

// The lstm workloads' model: input [T, B, 28] (time-major, PyTorch's default) -> logits [B, 10] from the last step.
class LSTMClassifier : public nn::Module {
 public:
  LSTMClassifier() : Module("LSTMClassifier") {
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(nn::LSTMOptions(28, 256).with_num_layers(2)));
    head_ = register_module("head", std::make_shared<nn::Linear>(256, 10));
  }
  Tensor forward(const Tensor& x) override { return head_->forward(lstm_->forward(x).select(0, x.size(0) - 1)); }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

// The transformer workload's model: tokens [T, B] (time-major, as libtorch's TransformerEncoder) -> logits [T, B, 96].
class CausalLM : public nn::Module {
 public:
  CausalLM(std::int64_t vocabulary, std::int64_t length) : Module("CausalLM") {
    const std::int64_t d_model = 256;
    embed_ = register_module("embed", std::make_shared<nn::Embedding>(vocabulary, d_model));
    position_ = register_module("position", std::make_shared<nn::Embedding>(length, d_model));
    const nn::TransformerEncoderLayer layer(
        nn::TransformerEncoderLayerOptions(d_model, 8).with_dim_feedforward(1024).with_dropout(0.1));
    encoder_ = register_module("encoder", std::make_shared<nn::TransformerEncoder>(layer, 4));
    head_ = register_module("head", std::make_shared<nn::Linear>(d_model, vocabulary));
    mask_ = nn::generate_square_subsequent_mask(length);
    positions_ = arange(length).unsqueeze(1);
  }
  Tensor forward(const Tensor& tokens) override {
    const Tensor x = add(embed_->forward(tokens), position_->forward(positions_));
    return head_->forward(encoder_->forward(x, mask_));
  }

 private:
  std::shared_ptr<nn::Embedding> embed_, position_;
  std::shared_ptr<nn::TransformerEncoder> encoder_;
  std::shared_ptr<nn::Linear> head_;
  Tensor mask_, positions_;
};

// One training step per measured step: zero_grad, forward, cross-entropy, backward, optimizer step.
void measure_training(const Settings& settings, const std::string& name, nn::Module& model, optim::Optimizer& optimizer,
                      const Tensor& input, const Tensor& labels) {
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    optimizer.zero_grad();
    Tensor loss = cross_entropy(model.forward(input), labels);
    loss.backward();
    optimizer.step();
  });
}

optim::SGDOptions sgd_momentum() {
  optim::SGDOptions options;
  options.lr = 0.01;
  options.momentum = 0.9;
  return options;
}

void run_resnet(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training(settings, "resnet", *model, optimizer, randn({batch, 3, 32, 32}), randint(0, 10, {batch}));
}

void run_mlp(const Settings& settings) {
  const std::int64_t batch = 128;
  auto model = make_mlp();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training(settings, "mlp", *model, optimizer, randn({batch, 784}), randint(0, 10, {batch}));
}

void run_cnn(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  measure_training(settings, "cnn", *model, optimizer, randn({batch, 1, 28, 28}), randint(0, 10, {batch}));
}

void run_lstm(const Settings& settings) {
  const std::int64_t batch = 128, steps = 28;
  auto model = std::make_shared<LSTMClassifier>();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  const Tensor input = randn({steps, batch, 28}), labels = randint(0, 10, {batch});
  // Note: tapegrad only (no libtorch counterpart): the tape records one training forward and its loss leave.
  prune_tape();
  const std::size_t records_before = tape_size();
  Tensor loss = cross_entropy(model->forward(input), labels);
  std::printf("tape_records_per_step=%zu\n", tape_size() - records_before);
  loss = Tensor();
  prune_tape();
  measure_training(settings, "lstm", *model, optimizer, input, labels);
}

void run_transformer(const Settings& settings) {
  const std::int64_t batch = 32, length = 128, vocabulary = 96;
  auto model = std::make_shared<CausalLM>(vocabulary, length);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions{});
  const Tensor tokens = randint(0, vocabulary, {length, batch}), targets = randint(0, vocabulary, {length * batch});
  auto loss_of = [&] { return cross_entropy(model->forward(tokens).reshape({length * batch, vocabulary}), targets); };
  // Note: tapegrad only (no libtorch counterpart): the tape records one training forward and its loss leave.
  prune_tape();
  const std::size_t records_before = tape_size();
  Tensor loss = loss_of();
  std::printf("tape_records_per_step=%zu\n", tape_size() - records_before);
  loss = Tensor();
  prune_tape();
  measure(settings, "transformer", static_cast<double>(batch), [&] {
    optimizer.zero_grad();
    loss_of().backward();
    optimizer.step();
  });
}

void run_lstm_infer_b1(const Settings& settings) {
  auto model = std::make_shared<LSTMClassifier>();
  model->eval();
  const Tensor input = randn({28, 1, 28});
  NoGradGuard no_grad;
  Tensor output;
  measure(settings, "lstm_infer_b1", 1, [&] { output = model->forward(input); });
}

void run_bn_fwd_bwd(const Settings& settings) {
  nn::BatchNorm2d norm(64);
  Tensor input = randn({64, 64, 28, 28}).requires_grad_();
  Tensor output_grad = randn({64, 64, 28, 28});
  measure(settings, "bn_fwd_bwd", 64, [&] {
    input.set_grad(Tensor());
    for (Tensor parameter : norm.parameters()) parameter.set_grad(Tensor());
    norm.forward(input).backward(output_grad);
  });
}

void run_infer_mlp(const Settings& settings, std::int64_t batch) {
  auto model = make_mlp();
  model->eval();
  Tensor input = randn({batch, 784});
  NoGradGuard no_grad;
  Tensor output;
  measure(settings, "infer_mlp_b" + std::to_string(batch), static_cast<double>(batch),
          [&] { output = model->forward(input); });
}

void run_matmul(const Settings& settings) {
  const std::int64_t n = 1024;
  Tensor a = randn({n, n}), b = randn({n, n});
  Tensor c;
  measure(settings, "matmul", 1, [&] { c = matmul(a, b); }, 2.0 * n * n * n);
}

int usage(const char* program) {
  std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--workload NAME] [--smoke]\n", program);
  return 2;
}

#include "compare_channels_last.h"  // NOLINT: workloads cnn_cl, resnet_cl, cnn_bf16_cl, resnet_bf16_cl (inside this namespace)
#include "compare_autocast.h"  // NOLINT: workloads matmul_bf16, mlp_bf16, cnn_bf16, resnet_bf16 (inside this namespace)

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
  set_num_threads(settings.threads);
  manual_seed(0);
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
    // Note: a library error (a bad TAPEGRAD_GEMM_PATH, say) ends the run with its message, not an abort.
    try {
      run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "compare: %s: %s\n", name, e.what());
      return 1;
    }
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
