// docs/batchnorm.md's example, compiled and run: the code between the DOC markers is exactly the page's
// snippet (the last test case checks that), and the other test cases assert what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

#include <fstream>
#include <sstream>
#include <string>

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

struct Observed {
  double mean_after_one, var_after_one;  // channel 0's running stats after one training batch
  double batch_mean, batch_unbiased_var; // that batch's channel-0 statistics
  std::int64_t tracked_after_frozen;     // num_batches_tracked after a batch with requires_grad = false
  bool eval_changed_buffers;
};

Observed batchnorm_semantics() {
  manual_seed(0);
  nn::BatchNormOptions options{3};
  options.momentum = nn::keras_momentum_to_tapegrad(0.99);  // Keras momentum 0.99 is tapegrad's 0.01
  nn::BatchNorm1d bn(options);                               // training mode by default
  bn.to(DType::Float64);

  Tensor x = randn({64, 3}, default_generator(), TensorOptions{}.with_dtype(DType::Float64)) * 2.0 + 5.0;
  Tensor y = bn(x);  // normalized with the batch mean and BIASED variance; running stats updated
  Tensor centered = x - mean(x, {0}, true);
  Observed o;
  o.batch_mean = mean(x, {0}).at({0});
  o.batch_unbiased_var = (sum(centered * centered, {0}) / 63.0).at({0});  // n - 1 = 63
  o.mean_after_one = bn.running_mean.at({0});  // 0.99 * 0 + 0.01 * batch_mean
  o.var_after_one = bn.running_var.at({0});    // 0.99 * 1 + 0.01 * batch_unbiased_var

  bn.weight.requires_grad_(false);  // "freezing" the affine parameters...
  bn.bias.requires_grad_(false);
  bn(x);                            // ...does not stop the running statistics
  o.tracked_after_frozen = static_cast<std::int64_t>(bn.num_batches_tracked.item());

  bn.eval();  // only eval mode does: running statistics are used and left alone
  const std::vector<double> before = bn.running_var.to_vector();
  bn(x);
  o.eval_changed_buffers = bn.running_var.to_vector() != before;
  return o;
}
// DOC-END

TEST_CASE("the BatchNorm page's example behaves as the page says") {
  const Observed o = batchnorm_semantics();
  CHECK(o.mean_after_one == Approx(0.01 * o.batch_mean).epsilon(1e-12));
  CHECK(o.var_after_one == Approx(0.99 + 0.01 * o.batch_unbiased_var).epsilon(1e-12));
  CHECK(o.batch_mean == Approx(5.0).margin(1.0));
  CHECK(o.tracked_after_frozen == 2);
  CHECK_FALSE(o.eval_changed_buffers);
}

TEST_CASE("docs/batchnorm.md contains this file's example verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_batchnorm.cpp", "docs/batchnorm.md");
}
