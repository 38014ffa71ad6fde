// Fashion-MNIST CNN: (Conv-BN-ReLU-MaxPool) x 2, then Linear-ReLU-Dropout-Linear, trained with SGD + Nesterov
// momentum under a one-cycle schedule. Saves a checkpoint; --evaluate CHECKPOINT loads it into a fresh model.
#include <iostream>

#include <fmt/format.h>

#include <tapegrad/framework/serialize/checkpoint.h>

#include "common/training.h"

using namespace tapegrad;

namespace {

std::shared_ptr<nn::Sequential> make_cnn() {
  using std::make_shared;
  return make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 32, 3}.with_padding(1)), make_shared<nn::BatchNorm2d>(32),
      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2),
      make_shared<nn::Conv2d>(nn::Conv2dOptions{32, 64, 3}.with_padding(1)), make_shared<nn::BatchNorm2d>(64),
      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2),
      make_shared<nn::Flatten>(),
      make_shared<nn::Linear>(64 * 7 * 7, 128), make_shared<nn::ReLU>(), make_shared<nn::Dropout>(0.25),
      make_shared<nn::Linear>(128, 10)});
}

}  // namespace

int main(int argc, char** argv) try {
  examples::Options options;
  options.epochs = 4;
  options.batch_size = 128;
  options.lr = 0.1;
  CLI::App app{"Train a BatchNorm CNN on Fashion-MNIST (or evaluate a saved checkpoint)"};
  examples::add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  examples::apply(options, "fashion_mnist_cnn");

  data::FashionMnistOptions data_options;
  data_options.dir = options.data_dir;
  const data::FashionMNIST test_set(data::Split::Test, data_options);

  if (!options.evaluate.empty()) {
    auto model = make_cnn();  // fresh weights; the checkpoint replaces every parameter and buffer
    const Checkpoint saved = load_checkpoint(options.evaluate);
    model->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
    const examples::Score score = examples::evaluate(*model, test_set);
    const auto recorded = saved.metadata.find("test_accuracy");
    fmt::print("reloaded {} (epoch {}): test accuracy {:.4f} (recorded at save time: {}), test loss {:.4f}\n",
               options.evaluate, saved.epoch, score.accuracy,
               recorded == saved.metadata.end() ? "n/a" : recorded->second, score.loss);
    if (recorded != saved.metadata.end() && fmt::format("{:.6f}", score.accuracy) != recorded->second) {
      std::cerr << "fashion_mnist_cnn: the reloaded model's accuracy differs from the saved one\n";
      return 1;
    }
    return 0;
  }

  const data::FashionMNIST full_train(data::Split::Train, data_options);
  const data::TensorDataset train_set = examples::take(full_train, options.subset);
  data::DataLoader loader(train_set, data::DataLoaderOptions{}
                                         .with_batch_size(options.batch_size)
                                         .with_shuffle()
                                         .with_drop_last()
                                         .with_seed(options.seed));
  const std::int64_t steps_per_epoch =
      options.max_steps > 0 ? std::min(options.max_steps, loader.size()) : loader.size();

  auto model = make_cnn();
  optim::SGD optimizer(model->parameters(),
                       optim::SGDOptions{.lr = options.lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  optim::OneCycleLR schedule(optimizer, options.lr,
                             optim::OneCycleOptions{.total_steps = steps_per_epoch * options.epochs});
  fmt::print("{}\n{} training images, {} test images, {} steps per epoch, {} threads\n", model->repr(),
             train_set.size(), test_set.size(), steps_per_epoch, get_num_threads());

  std::vector<examples::EpochMetrics> rows;
  examples::Score test_score;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    model->train();
    examples::Progress progress(fmt::format("epoch {}/{}", epoch, options.epochs),
                                steps_per_epoch * options.batch_size);
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0, step = 0;
    for (auto& batch : loader) {
      if (step++ >= steps_per_epoch) break;
      Tensor logits = (*model)(batch.images);
      Tensor loss = cross_entropy(logits, batch.labels);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      schedule.step();
      NoGradGuard no_grad;
      const std::int64_t n = batch.labels.numel();
      loss_sum += loss.item() * static_cast<double>(n);
      correct += static_cast<std::int64_t>(sum(eq(argmax(logits, 1), batch.labels).to(DType::Float64)).item());
      seen += n;
      progress.advance(n);
    }
    const double seconds = progress.elapsed_seconds();
    progress.finish();
    test_score = examples::evaluate(*model, test_set);
    examples::EpochMetrics row{epoch, loss_sum / static_cast<double>(seen),
                               static_cast<double>(correct) / static_cast<double>(seen), test_score.loss,
                               test_score.accuracy, seconds, static_cast<double>(seen) / seconds};
    rows.push_back(row);
    fmt::print("epoch {}/{}: loss {:.4f}  train acc {:.4f}  test loss {:.4f}  test acc {:.4f}  {:.1f}s  {:.0f} samples/s\n",
               epoch, options.epochs, row.train_loss, row.train_accuracy, row.test_loss, row.test_accuracy, seconds,
               row.samples_per_second);
    std::fflush(stdout);
    examples::write_metrics(options.output_dir, "fashion_mnist_cnn", rows);
  }

  Checkpoint saved;
  saved.set_model(*model);
  saved.optimizer = Checkpoint::from_named(optimizer.state(), EntryKind::Optimizer);
  saved.scheduler = Checkpoint::from_named(schedule.state(), EntryKind::Scheduler);
  saved.epoch = options.epochs;
  saved.step = steps_per_epoch * options.epochs;
  saved.rng_states["default"] = default_generator().state();
  saved.metadata["example"] = "fashion_mnist_cnn";
  saved.metadata["test_accuracy"] = fmt::format("{:.6f}", test_score.accuracy);
  save_checkpoint(saved, options.checkpoint);
  fmt::print("saved {} (test accuracy {:.4f})\n", options.checkpoint, test_score.accuracy);
  return 0;
} catch (const std::exception& error) {
  std::cerr << "fashion_mnist_cnn: " << error.what() << "\n";
  return 1;
}
