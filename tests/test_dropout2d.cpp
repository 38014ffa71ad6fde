// dropout2d and nn::Dropout2d: whole feature maps dropped with probability p and the rest scaled by 1/(1-p) (PyTorch's
// channel-wise dropout), the identity in eval mode, gradients, the layer's random stream as state, errors.
#include <cmath>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {
TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
}  // namespace

TEST_CASE("dropout2d zeroes whole feature maps with probability p and scales the rest by 1/(1-p)") {
  for (double p : {0.2, 0.5, 0.75}) {
    INFO("p = " << p);
    Generator gen(11);
    const std::int64_t n = 40, c = 50, hw = 6;
    const Tensor x = full({n, c, 2, 3}, 3.0, f64());
    const auto y = dropout2d(x, p, true, gen).to_vector();
    std::int64_t dropped = 0, mixed = 0;
    for (std::int64_t map = 0; map < n * c; ++map) {
      const double first = y[static_cast<std::size_t>(map * hw)];
      for (std::int64_t k = 1; k < hw; ++k)
        if (y[static_cast<std::size_t>(map * hw + k)] != first) ++mixed;
      if (first == 0.0)
        ++dropped;
      else
        CHECK(std::abs(first - 3.0 / (1.0 - p)) < 1e-14);
    }
    CHECK(mixed == 0);
    CHECK(static_cast<double>(dropped) / static_cast<double>(n * c) == Approx(p).margin(0.03));
  }
}

TEST_CASE("dropout2d is the identity in eval mode or with p = 0, and all zeros with p = 1") {
  const Tensor x = randn({2, 3, 4, 4});
  CHECK(dropout2d(x, 0.5, false).is_same(x));
  CHECK(dropout2d(x, 0.0, true).is_same(x));
  CHECK(max(abs(dropout2d(x, 1.0, true))).item() == 0.0);
  const Tensor unbatched = randn({5, 3, 3});
  CHECK(dropout2d(unbatched, 0.5, true).shape() == Shape{5, 3, 3});
}

TEST_CASE("dropout2d's gradient is the same mask times the output gradient") {
  rc::prop("gradcheck with a fixed mask", [] {
    const Shape shape{*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 4), 2, 2};
    const Tensor x = *gen::tensor_of_shape(shape);
    const double p = *rc::gen::element(0.25, 0.5);
    const std::uint64_t seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
    // A fresh generator with the same seed on every call: the mask is a constant of the function.
    TAPEGRAD_RC_GRADCHECK(([&](const std::vector<Tensor>& v) {
                            Generator gen(seed);
                            return dropout2d(v[0], p, true, gen);
                          }),
                          (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(([&](const std::vector<Tensor>& v) {
                                Generator gen(seed);
                                return dropout2d(v[0], p, true, gen);
                              }),
                              (std::vector<Tensor>{x}));
  });
}

TEST_CASE("dropout2d errors name the op") {
  CHECK_THROWS_WITH(dropout2d(zeros({4, 5}), 0.5, true),
                    "dropout2d: expected a 4-d input [N, C, H, W] or a 3-d input [C, H, W], got [4, 5]");
  CHECK_THROWS_WITH(dropout2d(zeros({1, 2, 3, 3}), 1.5, true),
                    "dropout2d: probability has to be between 0 and 1, but got 1.5");
  CHECK_THROWS_WITH(nn::Dropout2d(-0.1), "Dropout2d: probability has to be between 0 and 1, but got -0.1");
}

TEST_CASE("nn::Dropout2d: eval identity, masks from its own stream, the stream as state, clone") {
  nn::Dropout2d a(nn::DropoutOptions{}.with_seed(9)), b(nn::DropoutOptions{}.with_seed(9));
  CHECK(a.type_name() == "Dropout2d");
  CHECK(a.extra_repr() == "p=0.5");
  const Tensor x = ones({4, 8, 3, 3});
  const Tensor first = a(x);
  CHECK(identical(first, b(x)));
  CHECK_FALSE(identical(first, a(x)));
  CHECK(a.num_masks_drawn.item() == 2.0);
  a.eval();
  CHECK(a(x).is_same(x));
  a.train();
  nn::Dropout2d fresh(nn::DropoutOptions{}.with_seed(1));
  fresh.load_state(a.state());
  CHECK(identical(fresh(x), a(x)));
  auto copy = std::dynamic_pointer_cast<nn::Dropout2d>(a.clone());
  REQUIRE(copy);
  CHECK(identical(copy->forward(x), a(x)));
  // a rejected input does not move the stream
  CHECK_THROWS(a(ones({3, 3})));
  CHECK(a.num_masks_drawn.item() == 4.0);
}
