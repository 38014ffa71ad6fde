// docs/batchnorm.md's freezing, fusion and recalibration examples, compiled and run: the code between each pair
// of named DOC markers is exactly one of the page's blocks (the last test case checks that), and the other test
// cases assert what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN freeze
#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <sstream>
using namespace tapegrad;

std::shared_ptr<nn::Sequential> small_mlp() {
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Linear(4, 8), nn::BatchNorm1d(8), nn::ReLU(),
      nn::Linear(8, 1)});
}

struct FreezeObserved {
  bool training_after_parent_train;  // the frozen layer's mode after model->train()
  bool weight_moved, running_mean_moved;
  bool loaded_frozen;                // a fresh model loaded from the saved file
};

FreezeObserved freeze_under_a_training_loop() {
  manual_seed(0);
  auto model = small_mlp();
  auto bn = model->at_as<nn::BatchNorm1d>(1);
  bn->freeze();    // eval behaviour; weight and bias stop requiring grad
  model->train();  // a parent's train() does not undo it
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 0.1, .weight_decay = 1e-4});
  const Tensor weight_before = bn->weight.detach().clone(), mean_before = bn->running_mean.detach().clone();
  for (int step = 0; step < 5; ++step) {
    sgd.zero_grad();
    const Tensor y = (*model)(randn({16, 4}));
    mean(y * y).backward();
    sgd.step();  // bn's weight and bias have no grad, so SGD skips them (weight decay included)
  }
  FreezeObserved o;
  o.training_after_parent_train = bn->is_training();
  o.weight_moved = bn->weight.to_vector() != weight_before.to_vector();
  o.running_mean_moved = bn->running_mean.to_vector() != mean_before.to_vector();

  std::stringstream file;  // the flag is state: it is saved and loaded with the model
  save(*model, file);
  auto fresh = small_mlp();
  load(*fresh, file);
  o.loaded_frozen = fresh->at_as<nn::BatchNorm1d>(1)->frozen();
  return o;
}
// DOC-END freeze

// DOC-BEGIN fusion
// A Conv-BN-ReLU block and a Linear-BN head; fuse for inference and compare with the eval model.
struct FusionObserved {
  double max_difference;         // |fused - unfused| over a batch, float32
  std::string block_after_fusion;  // what the BatchNorm2d's slot holds now
  bool refused_training_model;
};

FusionObserved fuse_a_small_cnn() {
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Conv2d(nn::Conv2dOptions{1, 4, 3}.with_padding(1).with_bias(false)),
      nn::BatchNorm2d(4), nn::ReLU(), nn::Flatten(),
      nn::Linear(4 * 6 * 6, 3), nn::BatchNorm1d(3)});
  for (int step = 0; step < 3; ++step) (*model)(randn({8, 1, 6, 6}));  // running statistics away from 0 and 1

  FusionObserved o;
  try {
    nn::fuse_batchnorm(*model);  // still in training mode
    o.refused_training_model = false;
  } catch (const Error&) {
    o.refused_training_model = true;
  }
  model->eval();
  std::shared_ptr<nn::Module> fused = nn::fuse_batchnorm(*model);  // a copy; `model` is unchanged
  auto chain = std::dynamic_pointer_cast<nn::Sequential>(fused);
  o.block_after_fusion = chain->at(1)->type_name();  // "FoldedBatchNorm", the identity

  NoGradGuard no_grad;
  const Tensor x = randn({8, 1, 6, 6});
  o.max_difference = max(abs((*fused)(x) - (*model)(x))).item();
  return o;
}
// DOC-END fusion

// DOC-BEGIN recalibration
// After training, replace the EMA running statistics with the exact ones over (part of) the training data.
struct RecalibrationObserved {
  double ema_mean, exact_mean, data_mean;  // channel 0 of the BatchNorm, and of its inputs over the data
  std::int64_t batches;
  bool still_eval;
};

RecalibrationObserved recalibrate() {
  manual_seed(0);
  const Tensor images = randn({200, 3}) * 2.0 + 5.0;
  data::DataLoader loader(data::TensorDataset(images, zeros({200}, TensorOptions{}.with_dtype(DType::Int64))),
                          data::DataLoaderOptions{}.with_batch_size(32));  // the last batch has 8
  auto model = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::BatchNorm1d(3), nn::Linear(3, 2)});
  for (auto& batch : loader) (*model)(batch.images);  // one epoch of EMA updates (momentum 0.1)
  model->eval();

  RecalibrationObserved o;
  auto bn = model->at_as<nn::BatchNorm1d>(0);
  o.ema_mean = bn->running_mean.at({0});
  o.batches = nn::recompute_batchnorm_statistics(*model, loader);  // every batch of the loader's next epoch
  o.exact_mean = bn->running_mean.at({0});
  o.data_mean = mean(images, {0}).at({0});
  o.still_eval = !model->is_training();
  return o;
}
// DOC-END recalibration

TEST_CASE("the freezing example behaves as the page says") {
  const FreezeObserved o = freeze_under_a_training_loop();
  CHECK_FALSE(o.training_after_parent_train);
  CHECK_FALSE(o.weight_moved);
  CHECK_FALSE(o.running_mean_moved);
  CHECK(o.loaded_frozen);
}

TEST_CASE("the fusion example behaves as the page says") {
  const FusionObserved o = fuse_a_small_cnn();
  CHECK(o.refused_training_model);
  CHECK(o.block_after_fusion == "FoldedBatchNorm");
  CHECK(o.max_difference < 1e-5);
}

TEST_CASE("the recalibration example behaves as the page says") {
  const RecalibrationObserved o = recalibrate();
  CHECK(o.batches == 7);
  CHECK(o.still_eval);
  CHECK(o.exact_mean == Approx(o.data_mean).epsilon(1e-5));
  CHECK(std::abs(o.ema_mean - o.data_mean) > 1e-3);  // one epoch of EMA from 0 has not converged
}

TEST_CASE("docs/batchnorm.md contains the freezing, fusion and recalibration examples verbatim") {
  for (const char* block : {"freeze", "fusion", "recalibration"})
    tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_batchnorm_tools.cpp", "docs/batchnorm.md", block);
}
