// libtorch's half of bench/compare_autocast.h (matmul_bf16, mlp_bf16, cnn_bf16, resnet_bf16), included by
// bench/compare_torch.cpp inside its anonymous namespace after the float32 models.
// Note: libtorch 1.13's C++ API has no torch::autocast context manager; this is what Python's
// torch.autocast("cpu", dtype=torch.bfloat16) does on entry and exit (torch/amp/autocast_mode.py): set the CPU
// autocast dtype, enable it (which adds the AutocastCPU dispatch key to the thread's included set), bump the
// nesting count, and on exit clear the cast cache when the nesting drops to 0. The first step checks that
// autocast is really on: the output of a Linear must come back bfloat16, or the run stops.
#pragma once

class TorchAutocast {
 public:
  TorchAutocast() : previous_(at::autocast::is_cpu_enabled()), previous_dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
    at::autocast::increment_nesting();
  }
  ~TorchAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(previous_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
  TorchAutocast(const TorchAutocast&) = delete;
  TorchAutocast& operator=(const TorchAutocast&) = delete;

 private:
  bool previous_;
  at::ScalarType previous_dtype_;
};

void require_bf16(const torch::Tensor& t, const char* what) {
  if (t.scalar_type() != at::kBFloat16) {
    std::fprintf(stderr, "compare_torch: %s under autocast returned %s, not bfloat16: autocast is not on\n", what,
                 c10::toString(t.scalar_type()));
    std::exit(1);
  }
}

template <class Model>
void measure_training_bf16(const Settings& settings, const std::string& name, Model& model,
                           torch::optim::Optimizer& optimizer, const torch::Tensor& input, const torch::Tensor& labels) {
  {
    TorchAutocast autocast;
    torch::NoGradGuard no_grad;
    require_bf16(model->forward(input), name.c_str());
  }
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    zero_grad_to_none(optimizer);
    torch::Tensor loss;
    {
      TorchAutocast autocast;
      loss = torch::nn::functional::cross_entropy(model->forward(input), labels);
    }
    loss.backward();
    optimizer.step();
  });
}

void run_matmul_bf16(const Settings& settings) {
  const std::int64_t n = 1024;
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c;
  TorchAutocast autocast;
  require_bf16(torch::matmul(a, b), "matmul_bf16");
  measure(settings, "matmul_bf16", 1, [&] { c = torch::matmul(a, b); }, 2.0 * n * n * n);
}

void run_mlp_bf16(const Settings& settings) {
  const std::int64_t batch = 128;
  auto model = make_mlp();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training_bf16(settings, "mlp_bf16", model, optimizer, torch::randn({batch, 784}),
                        torch::randint(0, 10, {batch}, torch::kLong));
}

void run_cnn_bf16(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  measure_training_bf16(settings, "cnn_bf16", model, optimizer, torch::randn({batch, 1, 28, 28}),
                        torch::randint(0, 10, {batch}, torch::kLong));
}

void run_resnet_bf16(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training_bf16(settings, "resnet_bf16", model, optimizer, torch::randn({batch, 3, 32, 32}),
                        torch::randint(0, 10, {batch}, torch::kLong));
}
