// docs/views_and_indexing.md's example, compiled and run: the code between the DOC markers is exactly the
// page's snippet (the last test case checks that), and the other test case asserts what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;
using namespace tapegrad::indexing;

struct Walkthrough {
  Tensor x, column, rows, picked, masked, frozen;
  bool transpose_is_view = false;
};

Walkthrough walkthrough() {
  Walkthrough w;
  w.x = arange(0.0, 12.0, 1.0, DType::Float64).reshape({3, 4});

  // Views share the storage: writing through one changes the base.
  Tensor t = w.x.t();                   // [4, 3], strides [1, 4], no copy
  w.transpose_is_view = !t.is_contiguous() && t.storage_offset() == 0;
  w.x.narrow(0, 0, 1).zero_();          // row 0 of x is now zeros
  w.column = w.x.index({Slice(), 1});   // x[:, 1], a view
  w.column.mul_(10.0);                  // ... so this scales x's column 1

  // Tensors among the indices copy (advanced indexing).
  w.rows = w.x.index({from_vector(std::vector<std::int64_t>{2, 0}, {2})});  // x[[2, 0]]
  w.picked = w.x.index({Ellipsis, Slice(None, None, 2)});                  // x[..., ::2], a view
  w.masked = w.x.index({gt(w.x, 50.0)});                                   // x[x > 50]
  w.x.index_put_({gt(w.x, 50.0)}, -1.0);                                   // x[x > 50] = -1

  // InferenceMode: nothing records, and the results can never enter autograd.
  Tensor weight = ones({4, 2}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  {
    InferenceMode guard;
    w.frozen = matmul(w.x, weight);  // no grad_fn, is_inference() is true
  }
  return w;
}
// DOC-END

TEST_CASE("the walkthrough does what the page says") {
  const Walkthrough w = walkthrough();
  CHECK(w.transpose_is_view);
  CHECK(w.x.to_vector() == std::vector<double>{0, 0, 0, 0, 4, 50, 6, 7, 8, -1, 10, 11});
  CHECK(w.column.to_vector() == std::vector<double>{0, 50, -1});
  CHECK(w.rows.to_vector() == std::vector<double>{8, 90, 10, 11, 0, 0, 0, 0});
  CHECK(w.picked.to_vector() == std::vector<double>{0, 0, 4, 6, 8, 10});
  CHECK(w.masked.to_vector() == std::vector<double>{90});
  CHECK(w.frozen.is_inference());
  CHECK_FALSE(w.frozen.requires_grad());
  CHECK_THROWS_WITH(w.frozen * ones({3, 2}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad()),
                    Catch::Contains("inference tensor"));
}

TEST_CASE("docs/views_and_indexing.md quotes the example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_views.cpp", "docs/views_and_indexing.md");
}
