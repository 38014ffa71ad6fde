// The channels-last 2x2 max pool (kernels/max_pool_2x2_nhwc, one-byte taps): the same bits as the NCHW op for
// values, PyTorch's int64 indices and gradients, on odd sizes, channel counts off the vector width, ties, signed
// zeros, infinities and NaNs (PyTorch's rule: the last NaN of a window wins); float64 gradients of every order.
#include <cmath>
#include <limits>
#include <vector>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

// [n, c, h, w] with odd and even sizes and 1..40 channels (past one AVX-512 vector, and not a multiple of one).
// Values: mostly a few multiples of 1/4 (so windows tie), sometimes NaN, infinities and zeros of either sign.
rc::Gen<Tensor> pool_input(DType dtype) {
  return rc::gen::exec([=] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 3), c = *rc::gen::inRange<std::int64_t>(1, 41);
    const auto h = *rc::gen::inRange<std::int64_t>(2, 10), w = *rc::gen::inRange<std::int64_t>(2, 10);
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const bool specials = *rc::gen::arbitrary<bool>();
    std::vector<double> values;
    for (std::int64_t k = 0; k < n * c * h * w; ++k) {
      const int pick = *rc::gen::inRange(0, 40);
      if (specials && pick < 6) {
        const double special[] = {nan, inf, -inf, 0.0, -0.0, -nan};
        values.push_back(special[pick]);
      } else {
        values.push_back(*rc::gen::inRange(-8, 9) / 4.0);
      }
    }
    return from_vector(values, {n, c, h, w}, TensorOptions{}.with_dtype(DType::Float64)).to(dtype);
  });
}

}  // namespace

TEST_CASE("channels-last 2x2 max_pool2d: the NCHW op's bits for values, indices and gradients") {
  rc::prop("float32 and float64, ceil_mode either way, NaNs and ties", [] {
    const DType dtype = *rc::gen::element(DType::Float32, DType::Float64);
    const bool ceil_mode = *rc::gen::arbitrary<bool>();
    const Tensor x = *pool_input(dtype);
    const Tensor xa = x.detach().requires_grad_(true), xb = x.contiguous(kCL).detach().requires_grad_(true);
    const auto [ya, ia] = max_pool2d_with_indices(xa, 2, std::nullopt, 0, 1, ceil_mode);
    const auto [yb, ib] = max_pool2d_with_indices(xb, 2, std::nullopt, 0, 1, ceil_mode);
    RC_ASSERT(yb.is_contiguous(kCL));
    TAPEGRAD_RC_IDENTICAL(ya, yb);
    TAPEGRAD_RC_IDENTICAL(ia, ib);
    TAPEGRAD_RC_IDENTICAL(max_pool2d(xb, 2, std::nullopt, 0, 1, ceil_mode), yb);
    const Tensor g = (*gen::tensor_of_shape(ya.shape())).to(dtype);
    const Tensor da = autograd::grad({ya}, {xa}, {g})[0], db = autograd::grad({yb}, {xb}, {g})[0];
    RC_ASSERT(db.is_contiguous(kCL));
    TAPEGRAD_RC_IDENTICAL(da, db);
  });
}

TEST_CASE("channels-last 2x2 max_pool2d: a window's NaN rule, by hand") {
  // One image, one 2x2 window, two channels: channel 0 holds (1, NaN, 3, NaN), channel 1 (2, 5, 5, 4).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector(std::vector<double>{1.0, nan, 3.0, nan, 2.0, 5.0, 5.0, 4.0}, {1, 2, 2, 2},
                               TensorOptions{}.with_dtype(DType::Float64))
                       .contiguous(kCL)
                       .requires_grad_(true);
  const auto [y, indices] = max_pool2d_with_indices(x, 2);
  CHECK(std::isnan(y.contiguous().data<double>()[0]));
  CHECK(y.contiguous().data<double>()[1] == 5.0);
  // PyTorch: the last NaN (tap 3) for channel 0, the first maximum (tap 1) for channel 1.
  CHECK(indices.contiguous().data<std::int64_t>()[0] == 3);
  CHECK(indices.contiguous().data<std::int64_t>()[1] == 1);
  const Tensor dx = autograd::grad({y}, {x}, {ones_like(y)})[0].contiguous();
  const std::vector<double> expected{0, 0, 0, 1, 0, 1, 0, 0};
  for (std::size_t k = 0; k < expected.size(); ++k) CHECK(dx.data<double>()[k] == expected[k]);
}

TEST_CASE("channels-last 2x2 max_pool2d: float64 gradients of the first and second order") {
  rc::prop("gradcheck and gradgradcheck", [] {
    const auto c = *rc::gen::inRange<std::int64_t>(1, 20);
    const auto h = *rc::gen::inRange<std::int64_t>(2, 6), w = *rc::gen::inRange<std::int64_t>(2, 6);
    // Normal values from a generated seed: no ties (with probability 1), so the pool is differentiable at the point
    // checked; shrinking changes the seed, never makes values equal.
    manual_seed(*rc::gen::arbitrary<std::uint32_t>());
    const Tensor x = randn({2, c, h, w}).to(DType::Float64);
    const auto pool = [](const std::vector<Tensor>& v) { return max_pool2d(v[0].contiguous(kCL), 2); };
    TAPEGRAD_RC_GRADCHECK(pool, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(pool, (std::vector<Tensor>{x}));
  });
}
