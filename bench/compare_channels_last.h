// bench/compare's channels-last workloads (issue 42 item 1), included by bench/compare.cpp inside its anonymous
// namespace after the cnn and resnet models; bench/compare_channels_last_torch.h is libtorch's half, line for line.
//   cnn_cl     the cnn workload with model->to(MemoryFormat::ChannelsLast) and the batch converted with
//              contiguous(ChannelsLast) in every step (as a training loop converts each batch it loads)
//   resnet_cl  the same for the resnet workload
// Note: by PyTorch's rule a 1-channel input and the first convolution's [32, 1, 3, 3] weight are row-major and
// channels-last at once, so in both frameworks the cnn's first block stays row-major and the format switches
// at its second convolution (whose weight is channels-last).
#pragma once

// One training step per measured step, converting the batch to channels-last inside the step; with `autocast`
// the forward and the loss run under AutocastGuard (bfloat16), backward and the step after it.
void measure_training_channels_last(const Settings& settings, const std::string& name, nn::Module& model,
                                    optim::Optimizer& optimizer, const Tensor& input, const Tensor& labels,
                                    bool autocast = false) {
  model.to(MemoryFormat::ChannelsLast);
  measure(settings, name, static_cast<double>(input.size(0)), [&] {
    optimizer.zero_grad();
    Tensor loss;
    {
      AutocastGuard guard(DType::BFloat16, autocast);
      loss = cross_entropy(model.forward(input.contiguous(MemoryFormat::ChannelsLast)), labels);
    }
    loss.backward();
    optimizer.step();
  });
}

void run_cnn_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  measure_training_channels_last(settings, "cnn_cl", *model, optimizer, randn({batch, 1, 28, 28}),
                                 randint(0, 10, {batch}));
}

void run_resnet_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training_channels_last(settings, "resnet_cl", *model, optimizer, randn({batch, 3, 32, 32}),
                                 randint(0, 10, {batch}));
}

// cnn_bf16_cl, resnet_bf16_cl: the channels-last workloads with the forward and loss under bfloat16 autocast
// (both of issue 42's switches at once, as a user of both would train).
void run_cnn_bf16_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_cnn();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  measure_training_channels_last(settings, "cnn_bf16_cl", *model, optimizer, randn({batch, 1, 28, 28}),
                                 randint(0, 10, {batch}), true);
}

void run_resnet_bf16_cl(const Settings& settings) {
  const std::int64_t batch = 64;
  auto model = make_resnet();
  optim::SGD optimizer(model->parameters(), sgd_momentum());
  measure_training_channels_last(settings, "resnet_bf16_cl", *model, optimizer, randn({batch, 3, 32, 32}),
                                 randint(0, 10, {batch}), true);
}
