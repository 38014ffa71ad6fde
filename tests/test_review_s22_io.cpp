// Review (session 22) of optimizers, schedulers and serialization: each case is a defect found by comparing with
// PyTorch 1.13 (python3 scripts quoted in the comments), failing before its fix.
#include <catch2/catch.hpp>

#include <cmath>

#include <tapegrad/framework/serialize/detail/foreign.h>  // white-box: links zlib, which foreign_files.h uses
#include <tapegrad/framework/serialize/interop.h>
#include <tapegrad/tapegrad.h>

#include "support/error_of.h"
#include "support/foreign_files.h"

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

TEST_CASE("a torch.save file whose byteorder record says 'big' is refused, not read as little-endian") {
  // PyTorch >= 2.1 writes archive/byteorder (sys.byteorder of the saving machine) and swaps a big-endian file's
  // storages when loading; tapegrad read every storage as little-endian, so such a file loaded byte-swapped values.
  using namespace tapegrad::testing::foreign_files;
  const std::string big = small_model_pt({stored_entry("byteorder", "big")});
  CHECK_THAT(error_of([&] { read_pytorch(big, "big.pt"); }),
             Catch::Contains("big.pt") && Catch::Contains("big-endian"));
  CHECK_THAT(error_of([&] { read_pytorch(small_model_pt({stored_entry("byteorder", "middle")}), "odd.pt"); }),
             Catch::Contains("byteorder record 'middle'"));
  // "little" (what a little-endian PyTorch 2.x machine writes) and no record (1.x) read as before.
  CHECK(read_pytorch(small_model_pt({stored_entry("byteorder", "little")}), "little.pt").size() == 7);
  CHECK(read_pytorch(small_model_pt(), "plain.pt").size() == 7);
}
