// docs/from_libtorch.md's example, compiled and run: the code between the DOC markers is exactly the page's snippet
// (the last test case checks that), and the other test cases assert what the page claims about it.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

#include <filesystem>

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

// libtorch: struct Net : torch::nn::Module { ... torch::nn::Conv2d conv1{nullptr}; ... };
struct Net : nn::Module {
  Net() : nn::Module("Net") {
    conv1 = register_module("conv1", nn::Conv2d(1, 10, 5));
    conv2 = register_module("conv2", nn::Conv2d(10, 20, 5));
    conv2_drop = register_module("conv2_drop", nn::Dropout2d());
    fc1 = register_module("fc1", nn::Linear(320, 50));
    fc2 = register_module("fc2", nn::Linear(50, 10));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = relu(max_pool2d((*conv1)(input), 2));
    x = relu(max_pool2d((*conv2_drop)((*conv2)(x)), 2));
    x = relu((*fc1)(x.view({-1, 320})));
    x = dropout(x, /*p=*/0.5, /*training=*/is_training());
    return log_softmax((*fc2)(x), /*dim=*/1);
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout2d> conv2_drop;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// One SGD step on a batch; returns the loss.
double train_step(Net& model, optim::SGD& optimizer, const Tensor& images, const Tensor& labels) {
  model.train();
  optimizer.zero_grad();
  Tensor loss = nll_loss(model(images), labels);
  loss.backward();
  optimizer.step();
  return loss.item();
}

// The predicted class of each image, without recording.
Tensor predict(Net& model, const Tensor& images) {
  NoGradGuard no_grad;
  model.eval();
  return argmax(model(images), 1);
}
// DOC-END

TEST_CASE("the from_libtorch page's Net trains, predicts and round-trips through save/load") {
  manual_seed(1);
  Net model;
  optim::SGD optimizer(model.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.5});
  const Tensor images = randn({16, 1, 28, 28});
  const Tensor labels = randint(0, 10, {16});
  CHECK(model.named_parameters().size() == 8);
  CHECK(model.named_parameters()[0].first == "conv1.weight");
  double first = train_step(model, optimizer, images, labels), last = first;
  for (int step = 0; step < 30; ++step) last = train_step(model, optimizer, images, labels);
  CHECK(last < first);  // it memorises the batch
  const Tensor predicted = predict(model, images);
  CHECK(predicted.shape() == Shape{16});

  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_test_docs_from_libtorch.tg").string();
  save(model, path);
  manual_seed(2);
  Net reloaded;
  load(reloaded, path);
  std::filesystem::remove(path);
  CHECK(predict(reloaded, images).to_vector() == predicted.to_vector());
}

TEST_CASE("docs/from_libtorch.md contains this file's example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_from_libtorch.cpp", "docs/from_libtorch.md");
}
