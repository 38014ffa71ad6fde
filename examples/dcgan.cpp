// The libtorch DCGAN example, written on tapegrad and trained on Fashion-MNIST scaled to [-1, 1]. A generator of
// transposed convolutions (noise [N, 100, 1, 1] -> 4x4 -> 7x7 -> 14x14 -> 28x28, BatchNorm and ReLU between,
// Tanh at the end) plays against a discriminator of strided convolutions (LeakyReLU 0.2, BatchNorm on the inner
// two, Sigmoid at the end); both are trained with the binary cross-entropy on probabilities and Adam (lr 2e-4,
// beta1 0.5). Real labels are drawn from U(0.8, 1) (one-sided label smoothing, as the original does).
// Writes <output-dir>/dcgan_samples.png (an 8x8 grid from a fixed noise batch) after every epoch and a
// checkpoint of both networks and both optimizers (<output-dir>/dcgan.ckpt) at the end.
//
// Differences from the original, and why: --width scales every layer's channels (the original's are
// --width 64: 256/128/64 in the generator); a smaller width trains several times faster on a CPU. Adam's beta2
// is 0.999 as in the DCGAN paper (the libtorch program passes 0.5 for both betas).
#include <cmath>
#include <cstdio>
#include <iostream>

#include "common/png.h"
#include "common/training.h"

using namespace tapegrad;

namespace {

constexpr std::int64_t kNoiseSize = 100;

struct GeneratorNet : nn::Module {
  explicit GeneratorNet(std::int64_t width) : nn::Module("DCGANGenerator") {
    using Options = nn::ConvTranspose2dOptions;
    conv1 = register_module("conv1", nn::ConvTranspose2d(
                                         Options{kNoiseSize, 4 * width, 4}.with_bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(4 * width));
    conv2 = register_module("conv2", nn::ConvTranspose2d(
                                         Options{4 * width, 2 * width, 3}.with_stride(2).with_padding(1).with_bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(2 * width));
    conv3 = register_module("conv3", nn::ConvTranspose2d(
                                         Options{2 * width, width, 4}.with_stride(2).with_padding(1).with_bias(false)));
    bn3 = register_module("bn3", nn::BatchNorm2d(width));
    conv4 = register_module("conv4", nn::ConvTranspose2d(
                                         Options{width, 1, 4}.with_stride(2).with_padding(1).with_bias(false)));
  }

  // noise [N, 100, 1, 1] -> images [N, 1, 28, 28] in (-1, 1).
  Tensor forward(const Tensor& noise) override {
    Tensor x = relu((*bn1)((*conv1)(noise)));  // 4x4
    x = relu((*bn2)((*conv2)(x)));             // 7x7
    x = relu((*bn3)((*conv3)(x)));             // 14x14
    return tanh((*conv4)(x));                  // 28x28
  }

  std::shared_ptr<nn::ConvTranspose2d> conv1, conv2, conv3, conv4;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
};

// images [N, 1, 28, 28] -> probability of "real" [N, 1, 1, 1].
std::shared_ptr<nn::Sequential> make_discriminator(std::int64_t width) {
  auto conv = [](std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
    return nn::Conv2d(
        nn::Conv2dOptions{in, out, kernel}.with_stride(stride).with_padding(padding).with_bias(false));
  };
  return std::make_shared<nn::Sequential>(nn::Sequential{
      conv(1, width, 4, 2, 1), nn::LeakyReLU(0.2),                                                  // 14x14
      conv(width, 2 * width, 4, 2, 1), nn::BatchNorm2d(2 * width), nn::LeakyReLU(0.2),              // 7x7
      conv(2 * width, 4 * width, 4, 2, 1), nn::BatchNorm2d(4 * width), nn::LeakyReLU(0.2),          // 3x3
      conv(4 * width, 1, 3, 1, 0), nn::Sigmoid()});                                                 // 1x1
}

// Both networks under one root, so one checkpoint holds them ("generator.*", "discriminator.*").
struct Gan : nn::Module {
  Gan(std::int64_t width) : nn::Module("DCGAN") {
    generator = register_module("generator", GeneratorNet(width));
    discriminator = register_module("discriminator", make_discriminator(width));
  }
  std::shared_ptr<GeneratorNet> generator;
  std::shared_ptr<nn::Sequential> discriminator;
};

struct Settings {
  examples::Options common;
  std::int64_t width = 64;
  std::int64_t log_interval = 100;
};

void write_samples(GeneratorNet& generator, const Tensor& fixed_noise, const std::string& path) {
  // Note: in training mode, as the original samples: BatchNorm normalises with the batch's own statistics.
  NoGradGuard no_grad;
  const Tensor samples = generator(fixed_noise);
  const examples::GrayImage grid = examples::image_grid(samples, 8);
  examples::write_png_gray8(path, grid.width, grid.height, grid.pixels);
}

void save_run(const Gan& gan, const optim::Optimizer& g_optimizer, const optim::Optimizer& d_optimizer, int epoch,
              std::int64_t step, const std::string& path) {
  Checkpoint saved;
  saved.set_model(gan);
  nn::NamedTensors optimizers;
  for (const auto& [name, value] : g_optimizer.state()) optimizers.emplace_back("generator." + name, value);
  for (const auto& [name, value] : d_optimizer.state()) optimizers.emplace_back("discriminator." + name, value);
  saved.optimizer = Checkpoint::from_named(optimizers, EntryKind::Optimizer);
  saved.epoch = epoch;
  saved.step = step;
  saved.rng_states["default"] = default_generator().state();
  save_checkpoint(saved, path);
}

}  // namespace

int main(int argc, char** argv) try {
  Settings settings;
  examples::Options& o = settings.common;
  o.epochs = 30;
  o.batch_size = 64;
  o.lr = 2e-4;
  o.seed = 1;
  CLI::App app{"The libtorch DCGAN (ConvTranspose2d + BatchNorm generator, BCE losses) on Fashion-MNIST"};
  app.add_option("--epochs", o.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "mini-batch size")->capture_default_str();
  app.add_option("--lr", o.lr, "Adam's learning rate, both networks")->capture_default_str();
  app.add_option("--width", settings.width, "channels of the outer layers (the original: 64)")->capture_default_str();
  app.add_option("--threads", o.threads, "kernel threads (0: hardware concurrency)")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, shuffling and noise")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST directory (default: Debian's package)");
  app.add_option("--output-dir", o.output_dir, "samples and checkpoint go here")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "at most this many batches per epoch (smoke runs)");
  app.add_option("--subset", o.subset, "train on the first N training images only (smoke runs)");
  app.add_option("--log-interval", settings.log_interval, "print the losses every this many steps")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  examples::apply(o, "dcgan");
  if (settings.width < 1) throw Error(fmt::format("--width must be positive, got {}", settings.width));

  data::FashionMnistOptions data_options;
  data_options.dir = o.data_dir;
  data_options.mean = 0.5;  // (x - 0.5) / 0.5 maps the pixels [0, 1] to the generator's range [-1, 1]
  data_options.stddev = 0.5;
  const data::FashionMNIST full_train(data::Split::Train, data_options);
  const data::TensorDataset train_set = examples::take(full_train, o.subset);
  data::DataLoader loader(
      train_set, data::DataLoaderOptions{}.with_batch_size(o.batch_size).with_shuffle().with_drop_last().with_seed(o.seed));
  const std::int64_t steps_per_epoch = o.max_steps > 0 ? std::min(o.max_steps, loader.size()) : loader.size();

  Gan gan(settings.width);
  GeneratorNet& generator = *gan.generator;
  nn::Sequential& discriminator = *gan.discriminator;
  const optim::AdamOptions adam{.lr = o.lr, .betas = {0.5, 0.999}};
  optim::Adam g_optimizer(generator.parameters(), adam), d_optimizer(discriminator.parameters(), adam);
  const Tensor fixed_noise = randn({64, kNoiseSize, 1, 1});
  std::cout << gan.repr() << "\n" << train_set.size() << " training images, " << steps_per_epoch << " steps per epoch\n";

  const double start = examples::now_seconds();
  std::int64_t step = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    std::int64_t batch_index = 0;
    for (auto& batch : loader) {
      if (batch_index >= steps_per_epoch) break;
      const std::int64_t n = batch.images.size(0);
      // The discriminator: real images towards U(0.8, 1), generated ones towards 0.
      discriminator.zero_grad();
      const Tensor real_labels = uniform({n}, 0.8, 1.0);
      const Tensor d_loss_real = binary_cross_entropy(discriminator(batch.images).reshape({n}), real_labels);
      d_loss_real.backward();
      const Tensor fake_images = generator(randn({n, kNoiseSize, 1, 1}));
      const Tensor d_loss_fake = binary_cross_entropy(discriminator(fake_images.detach()).reshape({n}), zeros({n}));
      d_loss_fake.backward();
      d_optimizer.step();
      // The generator: make the discriminator call its images real.
      generator.zero_grad();
      const Tensor g_loss = binary_cross_entropy(discriminator(fake_images).reshape({n}), ones({n}));
      g_loss.backward();
      g_optimizer.step();
      ++batch_index;
      ++step;
      if (batch_index % settings.log_interval == 0 || batch_index == steps_per_epoch)
        std::printf("[%2d/%2d][%4lld/%4lld] D_loss %.4f | G_loss %.4f  (%.0f s)\n", epoch, o.epochs,
                    static_cast<long long>(batch_index), static_cast<long long>(steps_per_epoch),
                    d_loss_real.item() + d_loss_fake.item(), g_loss.item(), examples::now_seconds() - start);
      std::fflush(stdout);
    }
    write_samples(generator, fixed_noise, o.output_dir + "/dcgan_samples.png");
  }
  save_run(gan, g_optimizer, d_optimizer, o.epochs, step, o.checkpoint);
  std::printf("trained %d epochs (%lld steps) in %.0f s; wrote %s/dcgan_samples.png and %s\n", o.epochs,
              static_cast<long long>(step), examples::now_seconds() - start, o.output_dir.c_str(),
              o.checkpoint.c_str());
  return 0;
} catch (const std::exception& error) {
  std::cerr << "dcgan: " << error.what() << "\n";
  return 1;
}
