// The examples' CNN and LSTM and their training loop (examples/common/recipes.cpp, compiled into this test) on a
// subset of Fashion-MNIST: the loss falls well below its start, the accuracy beats chance by a wide margin, and a
// checkpoint reloaded into a fresh model gives identical outputs and accuracy. The character Transformer on
// Debian's fortunes: the loss falls, held-out bits per character against the bigram's, and a reloaded model
// samples the same text.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "common/recipes.h"

using namespace tapegrad;

namespace {

double mean_of(const std::vector<double>& values, std::size_t first, std::size_t count) {
  return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(first),
                         values.begin() + static_cast<std::ptrdiff_t>(first + count), 0.0) /
         static_cast<double>(count);
}


}  // namespace

TEST_CASE("the example CNN learns Fashion-MNIST and reloads to identical predictions", "[examples]") {
  const data::FashionMNIST full_train(data::Split::Train), full_test(data::Split::Test);
  const data::TensorDataset train_set = full_train.head(6400), test_set = full_test.head(1000);
  constexpr std::int64_t steps = 200, batch_size = 32;

  manual_seed(0);
  auto model = examples::make_cnn();
  examples::Training training = examples::make_sgd_one_cycle(*model, 0.05, steps);
  data::DataLoader loader(train_set,
                          data::DataLoaderOptions{}.with_batch_size(batch_size).with_shuffle().with_drop_last());
  const examples::EpochResult trained =
      examples::train_epoch(*model, loader, *training.optimizer, training.schedule.get(), steps);
  REQUIRE(trained.steps == steps);

  const double first_loss = mean_of(trained.step_losses, 0, 10);
  const double last_loss = mean_of(trained.step_losses, steps - 25, 25);
  INFO("mean loss over the first 10 steps " << first_loss << ", over the last 25 " << last_loss);
  CHECK(first_loss > 1.5);  // ~ln(10) = 2.30 at the start: the model really starts untrained
  CHECK(last_loss < 0.45 * first_loss);

  const examples::Score score = examples::evaluate(*model, test_set);
  INFO("test accuracy on 1000 images after " << steps << " steps: " << score.accuracy);
  CHECK(score.accuracy > 0.70);  // chance is 0.10

  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_examples_smoke.ckpt").string();
  save_checkpoint(examples::make_checkpoint(*model, *training.optimizer, training.schedule.get(), loader, 1, steps),
                  path);
  manual_seed(12345);  // the fresh model starts from other weights: only the file can make it agree
  auto reloaded = examples::make_cnn();
  const Checkpoint saved = load_checkpoint(path);
  reloaded->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  std::filesystem::remove(path);

  const examples::Score reloaded_score = examples::evaluate(*reloaded, test_set);
  CHECK(reloaded_score.accuracy == score.accuracy);
  CHECK(reloaded_score.loss == score.loss);
  NoGradGuard no_grad;
  model->eval();
  reloaded->eval();
  const Tensor images = test_set.get_batch({0, 1, 2, 3, 4, 5, 6, 7}).images;
  const Tensor expected = (*model)(images), actual = (*reloaded)(images);
  REQUIRE(expected.numel() == actual.numel());
  CHECK(std::memcmp(expected.raw_data(), actual.raw_data(), sizeof(float) * static_cast<std::size_t>(expected.numel())) == 0);
}

TEST_CASE("the example LSTM learns Fashion-MNIST rows and reloads to identical predictions", "[examples]") {
  const data::FashionMNIST full_train(data::Split::Train), full_test(data::Split::Test);
  const data::TensorDataset train_set = full_train.head(3200), test_set = full_test.head(500);
  constexpr std::int64_t steps = 100, batch_size = 32;

  manual_seed(0);
  auto model = examples::make_lstm(32);  // the example's model at a quarter of its width, for time
  examples::Training training = examples::make_adam_one_cycle(*model, 1e-2, steps);
  data::DataLoader loader(train_set,
                          data::DataLoaderOptions{}.with_batch_size(batch_size).with_shuffle().with_drop_last());
  const examples::EpochResult trained =
      examples::train_epoch(*model, loader, *training.optimizer, training.schedule.get(), steps);
  REQUIRE(trained.steps == steps);

  const double first_loss = mean_of(trained.step_losses, 0, 10);
  const double last_loss = mean_of(trained.step_losses, steps - 25, 25);
  INFO("mean loss over the first 10 steps " << first_loss << ", over the last 25 " << last_loss);
  CHECK(first_loss > 1.5);
  CHECK(last_loss < 0.6 * first_loss);

  const examples::Score score = examples::evaluate(*model, test_set);
  INFO("test accuracy on 500 images after " << steps << " steps: " << score.accuracy);
  CHECK(score.accuracy > 0.55);  // chance is 0.10

  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_examples_smoke_lstm.ckpt").string();
  save_checkpoint(examples::make_checkpoint(*model, *training.optimizer, training.schedule.get(), loader, 1, steps),
                  path);
  manual_seed(12345);
  auto reloaded = examples::make_lstm(32);
  const Checkpoint saved = load_checkpoint(path);
  reloaded->load_state(saved.model_state(), /*strict=*/true, saved.model_versions);
  std::filesystem::remove(path);

  const examples::Score reloaded_score = examples::evaluate(*reloaded, test_set);
  CHECK(reloaded_score.accuracy == score.accuracy);
  CHECK(reloaded_score.loss == score.loss);
  NoGradGuard no_grad;
  const Tensor images = test_set.get_batch({0, 1, 2, 3, 4, 5, 6, 7}).images;
  const Tensor expected = (*model)(images), actual = (*reloaded)(images);
  REQUIRE(expected.numel() == actual.numel());
  CHECK(std::memcmp(expected.raw_data(), actual.raw_data(), sizeof(float) * static_cast<std::size_t>(expected.numel())) == 0);
}

TEST_CASE("the example character Transformer learns fortunes and reloads to the identical sample", "[examples]") {
  // Note: a tenth of the held-out fortunes and a tiny model, for time; the example itself runs the full split.
  const examples::CharCorpus corpus = examples::load_fortunes();
  REQUIRE(corpus.held_out_fortunes * 10 <= corpus.fortunes);
  REQUIRE(corpus.held_out.size() > 20000);
  const std::vector<std::int64_t> held_out(corpus.held_out.begin(), corpus.held_out.begin() + 20000);
  const examples::CharTransformerOptions options{
      .d_model = 32, .heads = 2, .layers = 1, .feed_forward = 64, .context = 32, .dropout = 0.0};
  constexpr std::int64_t steps = 120, batch_size = 16;

  manual_seed(0);
  auto model = examples::make_char_transformer(options);
  examples::Training training = examples::make_adamw_one_cycle(*model, 1e-2, steps);
  const std::vector<double> losses =
      examples::train_char_lm(*model, corpus.train, options.context, batch_size, steps, training);
  REQUIRE(losses.size() == steps);
  const double first_loss = mean_of(losses, 0, 5), last_loss = mean_of(losses, steps - 25, 25);
  INFO("mean loss over the first 5 steps " << first_loss << ", over the last 25 " << last_loss);
  CHECK(first_loss > 4.0);  // ~ln(96) = 4.56 nats at the start: the model really starts untrained
  CHECK(last_loss < 0.8 * first_loss);

  const double model_bits = examples::model_bits_per_char(*model, held_out, options.context);
  const double bigram_bits = examples::bigram_bits_per_char(corpus.train, held_out);
  INFO("held-out bits/char: model " << model_bits << ", bigram " << bigram_bits);
  CHECK(bigram_bits < 4.0);  // the baseline itself is far below the uniform log2(96) = 6.58
  CHECK(model_bits < 4.3);  // uniform is 6.58, the unigram about 4.4

  const std::string sample = examples::sample_text(*model, "The ", 40, options.context, 0.8, 7);
  CHECK(sample.size() == 40);
  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_examples_smoke_char.tg").string();
  save(*model, path);
  manual_seed(12345);
  auto reloaded = examples::make_char_transformer(options);
  CHECK(examples::sample_text(*reloaded, "The ", 40, options.context, 0.8, 7) != sample);
  load(*reloaded, path);
  std::filesystem::remove(path);
  CHECK(examples::sample_text(*reloaded, "The ", 40, options.context, 0.8, 7) == sample);
  CHECK(examples::model_bits_per_char(*reloaded, held_out, options.context) == model_bits);
}
