// docs/integer_tensors.md's example, compiled and run: the code between the DOC markers is exactly the page's
// snippet (the last test case checks that), and the other test case asserts what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

struct Counts {
  std::int64_t correct = 0, positives = 0, row_total = 0;
  DType sum_dtype = DType::Float32, scaled_dtype = DType::Float32, shifted_dtype = DType::Float32;
  double first_logit = 0;
};

Counts count_correct() {
  Tensor logits = tensor({2.0, 0.5, -1.0, 0.1, 0.3, 3.0, 1.0, 4.0, 0.0}, {3, 3});
  Tensor target = from_vector(std::vector<std::int64_t>{0, 2, 0}, {3});

  Counts c;
  Tensor pred = logits.argmax(1);                        // int64 [3]
  c.correct = pred.eq(target).sum().item<std::int64_t>();  // int64 mask, int64 sum
  c.sum_dtype = pred.eq(target).sum().dtype();
  c.positives = logits.gt(0.0).sum().item<std::int64_t>();  // float mask: a float32 sum, read as an integer
  c.row_total = target.sum().item<std::int64_t>();
  c.first_logit = logits[0][0].item<double>();              // t[i] is t.select(0, i), a view

  c.shifted_dtype = target.add(1).dtype();  // int64 + an integer Scalar stays int64
  c.scaled_dtype = target.mul(0.5).dtype();   // int64 * a floating Scalar is float32, as in PyTorch
  return c;
}
// DOC-END

TEST_CASE("the example counts what the page says") {
  const Counts c = count_correct();
  CHECK(c.correct == 2);  // rows 0 and 1 are right, row 2 predicts 1 for target 0
  CHECK(c.sum_dtype == DType::Int64);
  CHECK(c.positives == 7);
  CHECK(c.row_total == 2);
  CHECK(c.first_logit == 2.0);
  CHECK(c.shifted_dtype == DType::Int64);
  CHECK(c.scaled_dtype == DType::Float32);
}

TEST_CASE("docs/integer_tensors.md quotes the example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_integer.cpp", "docs/integer_tensors.md");
}
