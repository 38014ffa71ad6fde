// docs/randomness.md's example, compiled and run: the code between the DOC markers is exactly the page's
// snippet (the last test case checks that), and the other test case asserts what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

// One seed decides the whole model: initial weights and every Dropout's masks.
std::shared_ptr<nn::Sequential> make_model(std::uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Linear(8, 16), nn::ReLU(), nn::Dropout(0.5),
      nn::Linear(16, 16), nn::Dropout(0.5), nn::Linear(16, 2)});
}

Tensor training_output(std::uint64_t seed) {
  auto model = make_model(seed);
  model->train();
  Generator inputs(123);  // an explicit generator: its own stream, untouched by manual_seed
  return model->forward(randn({4, 8}, inputs));
}
// DOC-END

TEST_CASE("the same seed gives the same weights and masks; another seed other ones") {
  const Tensor a = training_output(1), b = training_output(1), c = training_output(2);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != c.to_vector());
  auto model = make_model(1);
  auto first = std::dynamic_pointer_cast<nn::Dropout>(model->children()[2]);
  auto second = std::dynamic_pointer_cast<nn::Dropout>(model->children()[4]);
  CHECK(first->seed() != second->seed());
}

TEST_CASE("docs/randomness.md quotes the example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_randomness.cpp", "docs/randomness.md");
}
