// libtorch's half of bench/compare_channels_last.h (cnn_cl, resnet_cl), included by bench/compare_torch.cpp
// inside its anonymous namespace after the cnn and resnet models.
// Note: libtorch 1.13's C++ Module::to takes a device or dtype, not a memory format (torch/nn/module.h), so this
// does what Python's model.to(memory_format=torch.channels_last) does: every 4-d parameter and buffer's data is
// replaced by its channels-last copy, in place (the optimizer, built after, holds the same tensors).
#pragma once

template <class Model>
void to_channels_last(Model& model) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model->parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  for (torch::Tensor& b : model->buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
}

// One training step per measured step, converting the batch to channels-last inside the step; with `autocast`
// the forward and the loss run under CPU autocast (bfloat16), backward and the step after it.
template <class Model>
void measure_training_channels_last(const Settings& settings, const std::string& name, Model& model,
                                    torch::optim::Optimizer& optimizer, const torch::Tensor& input,
                                    const torch::Tensor& labels, bool autocast = false) {
  if (autocast) {  // as measure_training_bf16: proves autocast is on before timing it
    TorchAutocast guard;
    torch::NoGradGuard no_grad;
    require_bf16(model->forward(input.contiguous(at::MemoryFormat::ChannelsLast)), name.c_str());
  }
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    zero_grad_to_none(optimizer);
    torch::Tensor loss;
    {
      std::optional<TorchAutocast> guard;
      if (autocast) guard.emplace();
      loss = torch::nn::functional::cross_entropy(model->forward(input.contiguous(at::MemoryFormat::ChannelsLast)),
                                                  labels);
    }
    loss.backward();
    optimizer.step();
  });
}

void run_cnn_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  to_channels_last(model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  measure_training_channels_last(settings, "cnn_cl", model, optimizer, torch::randn({batch, 1, 28, 28}),
                                 torch::randint(0, 10, {batch}, torch::kLong));
}

void run_resnet_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  to_channels_last(model);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training_channels_last(settings, "resnet_cl", model, optimizer, torch::randn({batch, 3, 32, 32}),
                                 torch::randint(0, 10, {batch}, torch::kLong));
}

// cnn_bf16_cl, resnet_bf16_cl: channels-last with the forward and loss under CPU autocast (bfloat16).
void run_cnn_bf16_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  to_channels_last(model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  measure_training_channels_last(settings, "cnn_bf16_cl", model, optimizer, torch::randn({batch, 1, 28, 28}),
                                 torch::randint(0, 10, {batch}, torch::kLong), true);
}

void run_resnet_bf16_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  to_channels_last(model);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  measure_training_channels_last(settings, "resnet_bf16_cl", model, optimizer, torch::randn({batch, 3, 32, 32}),
                                 torch::randint(0, 10, {batch}, torch::kLong), true);
}
