// Review (session 22) of optimizers, schedulers and serialization: each case is a defect found by comparing with
// PyTorch 1.13 (python3 scripts quoted in the comments), failing before its fix.
#include <catch2/catch.hpp>

#include <cmath>

#include <tapegrad/tapegrad.h>

#include "support/error_of.h"

using namespace tapegrad;
using tapegrad::testing::error_of;

TEST_CASE("LinearLR with start_factor 0 is refused at construction instead of making the lr NaN") {
  // PyTorch 1.13: LinearLR(opt, start_factor=0.0) sets lr 0, then scheduler.step() raises ZeroDivisionError
  // (lr * (1 + delta / (total_iters * 0 + 0 * delta))). tapegrad computed the same division in double: lr NaN.
  Tensor p = ones({2}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  CHECK_THAT(error_of([&] { optim::LinearLR(sgd, 0.0, 1.0, 4); }),
             Catch::Contains("LinearLR: Starting multiplicative factor") && Catch::Contains("got 0"));
  CHECK(sgd.param_groups()[0].lr() == 0.1);
  // A small positive factor still warms up as PyTorch does (lr 0.1 * 0.25 at epoch 0, then linear to 0.1).
  optim::LinearLR warm_up(sgd, 0.25, 1.0, 3);
  CHECK(sgd.param_groups()[0].lr() == Approx(0.025));
  warm_up.step();
  CHECK(sgd.param_groups()[0].lr() == Approx(0.05));
  CHECK(std::isfinite(sgd.param_groups()[0].lr()));
}
