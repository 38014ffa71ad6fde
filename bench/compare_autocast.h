// bfloat16 autocast workloads of bench/compare (matmul_bf16, mlp_bf16, cnn_bf16, resnet_bf16), included by
// bench/compare.cpp inside its anonymous namespace after the float32 models; bench/compare_autocast_torch.h is
// libtorch's half. The same models, optimizers and batches as matmul / mlp / cnn / resnet, with the forward and
// the loss under AutocastGuard (bfloat16 matmul, linear and conv2d; docs/autocast.md) and backward and the
// optimizer step after it, as PyTorch's autocast recipe writes a training step.
#pragma once

void measure_training_bf16(const Settings& settings, const std::string& name, nn::Module& model,
                           optim::Optimizer& optimizer, const Tensor& input, const Tensor& labels) {
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    optimizer.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DType::BFloat16);
      loss = cross_entropy(model.forward(input), labels);
    }
    loss.backward();
    optimizer.step();
  });
}

void run_matmul_bf16(const Settings& settings) {
  const std::int64_t n = 1024;
  Tensor a = randn({n, n}), b = randn({n, n});
  Tensor c;
  AutocastGuard autocast(DType::BFloat16);
  measure(settings, "matmul_bf16", 1, [&] { c = matmul(a, b); }, 2.0 * n * n * n);
}

void run_mlp_bf16(const Settings& settings) {
  const std::int64_t batch = 128;
  auto model = make_mlp();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training_bf16(settings, "mlp_bf16", *model, optimizer, randn({batch, 784}), randint(0, 10, {batch}));
}

void run_cnn_bf16(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  measure_training_bf16(settings, "cnn_bf16", *model, optimizer, randn({batch, 1, 28, 28}), randint(0, 10, {batch}));
}

void run_resnet_bf16(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training_bf16(settings, "resnet_bf16", *model, optimizer, randn({batch, 3, 32, 32}),
                        randint(0, 10, {batch}));
}
