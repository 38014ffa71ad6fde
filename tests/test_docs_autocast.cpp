// docs/autocast.md's example, compiled and run: the code between the DOC markers is exactly the page's snippet
// (the last test case checks that), and the other test case asserts what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

struct Step {
  DType logits, loss, weight, weight_grad;
  bool enabled_inside, enabled_after;
};

Step train_one_step_in_bfloat16() {
  manual_seed(0);
  nn::Sequential model(nn::Linear(64, 32), nn::ReLU(), nn::Linear(32, 10));
  optim::SGD sgd(model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn({16, 64}), labels = randint(0, 10, {16});
  Step s;
  Tensor loss;
  {
    AutocastGuard autocast;  // bfloat16: matmul, bmm, linear and conv2d inside this scope
    s.enabled_inside = autocast_enabled();
    const Tensor logits = model.forward(x);  // bfloat16 products, float32 result
    s.logits = logits.dtype();
    loss = cross_entropy(logits, labels);  // losses, softmax, reductions: float32
  }
  s.enabled_after = autocast_enabled();
  sgd.zero_grad();
  loss.backward();  // outside the scope, as in PyTorch: the recorded products run backward in bfloat16
  sgd.step();       // float32 parameters, gradients and momentum
  s.loss = loss.dtype();
  const Tensor weight = model.parameters()[0];
  s.weight = weight.dtype();
  s.weight_grad = weight.grad().dtype();
  return s;
}
// DOC-END

TEST_CASE("the autocast page's example behaves as the page says") {
  const Step s = train_one_step_in_bfloat16();
  CHECK(s.enabled_inside);
  CHECK_FALSE(s.enabled_after);
  CHECK(s.logits == DType::Float32);
  CHECK(s.loss == DType::Float32);
  CHECK(s.weight == DType::Float32);
  CHECK(s.weight_grad == DType::Float32);
}

TEST_CASE("docs/autocast.md contains this file's example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_autocast.cpp", "docs/autocast.md");
}
