// conv_transpose2d and nn::ConvTranspose2d: PyTorch's values (tests/data/conv_transpose_reference.txt), the adjoint
// identity with conv2d, gradients and second derivatives over random options, float32 against float64, error
// messages, and the layer's shapes, init bounds, printing and clone.
#include <cmath>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

struct Options {
  IntPair stride = 1, padding = 0, output_padding = 0, dilation = 1;
  std::int64_t groups = 1;
};

struct Problem {
  Options options;
  Tensor x, w, b;
};

// A random transposed-convolution problem whose output is not empty.
rc::Gen<Problem> problem(std::int64_t max_channels_per_group = 2) {
  return rc::gen::exec([=] {
    Problem p;
    Options& o = p.options;
    o.groups = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto cg = *rc::gen::inRange<std::int64_t>(1, max_channels_per_group + 1);
    const auto og = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto kh = *rc::gen::inRange<std::int64_t>(1, 4), kw = *rc::gen::inRange<std::int64_t>(1, 4);
    o.stride = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    o.dilation = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    o.output_padding = {*rc::gen::inRange<std::int64_t>(0, o.stride.h), *rc::gen::inRange<std::int64_t>(0, o.stride.w)};
    const auto h = *rc::gen::inRange<std::int64_t>(1, 4), w = *rc::gen::inRange<std::int64_t>(1, 4);
    // padding small enough that the output keeps at least one row and column
    const auto full_h = (h - 1) * o.stride.h + o.dilation.h * (kh - 1) + o.output_padding.h + 1;
    const auto full_w = (w - 1) * o.stride.w + o.dilation.w * (kw - 1) + o.output_padding.w + 1;
    o.padding = {*rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(3, (full_h - 1) / 2 + 1)),
                 *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(3, (full_w - 1) / 2 + 1))};
    const auto n = *rc::gen::inRange<std::int64_t>(1, 3);
    p.x = *gen::tensor_of_shape({n, cg * o.groups, h, w});
    p.w = *gen::tensor_of_shape({cg * o.groups, og, kh, kw});
    if (*rc::gen::arbitrary<bool>()) p.b = *gen::tensor_of_shape({og * o.groups});
    return p;
  });
}

Tensor run(const Problem& p, const Tensor& x, const Tensor& w, const Tensor& b) {
  const Options& o = p.options;
  return conv_transpose2d(x, w, b, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}

std::vector<Tensor> inputs_of(const Problem& p) {
  std::vector<Tensor> inputs{p.x, p.w};
  if (p.b.defined()) inputs.push_back(p.b);
  return inputs;
}

}  // namespace

TEST_CASE("conv_transpose2d matches PyTorch's values and gradients") {
  const auto ref = tapegrad::testing::load_reference_file("conv_transpose_reference.txt");
  int cases = 0;
  for (const auto& [key, value] : ref) {
    if (!key.ends_with("/options")) continue;
    const std::string name = key.substr(0, key.size() - 8);
    INFO("case " << name);
    const auto o = value.to_vector();  // kernel(2), stride(2), padding(2), output_padding(2), groups, bias, dilation(2)
    auto pair = [&](std::size_t i) { return IntPair(static_cast<std::int64_t>(o[i]), static_cast<std::int64_t>(o[i + 1])); };
    const bool has_bias = o[9] != 0.0;
    const Tensor x = ref.at(name + "/input").detach().requires_grad_();
    const Tensor w = ref.at(name + "/weight").detach().requires_grad_();
    const Tensor b = has_bias ? ref.at(name + "/bias").detach().requires_grad_() : Tensor();
    const Tensor y = conv_transpose2d(x, w, b, pair(2), pair(4), pair(6), static_cast<std::int64_t>(o[8]), pair(10));
    REQUIRE(y.shape() == ref.at(name + "/output").shape());
    CHECK(allclose(y, ref.at(name + "/output"), 1e-12, 1e-12));
    y.backward(ref.at(name + "/grad_output"));
    CHECK(allclose(x.grad(), ref.at(name + "/grad_input"), 1e-12, 1e-12));
    CHECK(allclose(w.grad(), ref.at(name + "/grad_weight"), 1e-12, 1e-12));
    if (has_bias) CHECK(allclose(b.grad(), ref.at(name + "/grad_bias"), 1e-12, 1e-12));
    ++cases;
  }
  CHECK(cases == 8);
}

TEST_CASE("conv_transpose2d is the adjoint of conv2d: <conv_transpose(x, w), y> = <x, conv2d(y, w)>") {
  rc::prop("adjoint", [] {
    const Problem p = *problem(3);
    const Options& o = p.options;
    const Tensor t = run(p, p.x, p.w, Tensor());
    const Tensor y = *gen::tensor_of_shape(t.shape());
    const Tensor c = conv2d(y, p.w, Tensor(), o.stride, o.padding, o.dilation, o.groups);
    RC_ASSERT(c.shape() == p.x.shape());
    RC_ASSERT(std::abs(sum(t * y).item() - sum(c * p.x).item()) <= 1e-10 * (1 + std::abs(sum(c * p.x).item())));
  });
}

TEST_CASE("conv_transpose2d gradients w.r.t. input, weight and bias match finite differences") {
  rc::prop("gradcheck", [] {
    const Problem p = *problem();
    TAPEGRAD_RC_GRADCHECK(([&p](const std::vector<Tensor>& v) {
                            return run(p, v[0], v[1], v.size() > 2 ? v[2] : Tensor());
                          }),
                          inputs_of(p));
  });
}

TEST_CASE("conv_transpose2d second derivatives match finite differences") {
  rc::prop("gradgradcheck", [] {
    const Problem p = *problem(1);
    TAPEGRAD_RC_GRADGRADCHECK(([&p](const std::vector<Tensor>& v) {
                                return run(p, v[0], v[1], v.size() > 2 ? v[2] : Tensor());
                              }),
                              inputs_of(p));
  });
}

TEST_CASE("float32 conv_transpose2d agrees with float64, and an unbatched input is a batch of one") {
  Generator gen(5);
  const Tensor x = randn({3, 6, 7, 7}, gen, f64()), w = randn({6, 4, 4, 4}, gen, f64()), b = randn({4}, gen, f64());
  const Tensor y64 = conv_transpose2d(x, w, b, 2, 1);
  CHECK(y64.shape() == Shape{3, 4, 14, 14});
  const Tensor y32 = conv_transpose2d(x.to(DType::Float32), w.to(DType::Float32), b.to(DType::Float32), 2, 1);
  CHECK(y32.dtype() == DType::Float32);
  CHECK(allclose(y32.to(DType::Float64), y64, 1e-4, 1e-4));
  const Tensor one = randn({6, 3, 3}, gen, f64());
  const Tensor unbatched = conv_transpose2d(one, w, b, 2, 1, 1);
  CHECK(unbatched.shape() == Shape{4, 7, 7});  // (3 - 1) * 2 - 2 * 1 + (4 - 1) + 1 + 1
  CHECK(allclose(unbatched, conv_transpose2d(one.reshape({1, 6, 3, 3}), w, b, 2, 1, 1).reshape({4, 7, 7})));
}

TEST_CASE("conv_transpose2d errors name the op and the shapes") {
  const Tensor x = zeros({1, 3, 4, 4}), w = zeros({3, 2, 3, 3});
  CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 2, 4, 4}), w),
                    "conv_transpose2d: weight [3, 2, 3, 3] expects 3 input channels, but input [1, 2, 4, 4] has 2");
  CHECK_THROWS_WITH(conv_transpose2d(x, w, Tensor(), 2, 0, 2),
                    "conv_transpose2d: output_padding (2, 2) must be non-negative and smaller than stride (2, 2)");
  CHECK_THROWS_WITH(conv_transpose2d(x, w, zeros({3})),
                    "conv_transpose2d: bias [3] must be [2], one value per output channel");
  CHECK_THROWS_WITH(conv_transpose2d(zeros({3, 4}), w),
                    "conv_transpose2d: expected a 3-d [C_in, H, W] or 4-d [N, C_in, H, W] input, got [3, 4]");
  CHECK_THROWS_WITH(conv_transpose2d(x, w.to(DType::Float64)),
                    "conv_transpose2d: input is float32 and weight is float64; expected the same float dtype");
  CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 3, 1, 1}), zeros({3, 2, 1, 1}), Tensor(), 1, 1),
                    "conv_transpose2d: input [1, 3, 1, 1] with weight [3, 2, 1, 1], stride (1, 1) and padding (1, 1) "
                    "gives an empty output -1 x -1");
  CHECK_THROWS_WITH(conv_transpose2d(x, zeros({3, 2, 3, 3}), Tensor(), 1, 0, 0, 2),
                    "conv_transpose2d: weight [3, 2, 3, 3] has 3 input channels, not divisible by groups=2");
}

TEST_CASE("nn::ConvTranspose2d: PyTorch's weight layout, output shape, init bounds, printing and clone") {
  manual_seed(0);
  nn::ConvTranspose2d layer(nn::ConvTranspose2dOptions{16, 8, 4}.with_stride(2).with_padding(1));
  CHECK(layer.weight.shape() == Shape{16, 8, 4, 4});
  CHECK(layer.bias.shape() == Shape{8});
  // PyTorch's fan_in for a transposed conv weight [in, out, kh, kw] is out * kh * kw = 128.
  const double bound = 1.0 / std::sqrt(128.0);
  CHECK(max(abs(layer.weight)).item() <= bound);
  CHECK(max(abs(layer.weight)).item() > 0.9 * bound);
  CHECK(max(abs(layer.bias)).item() <= bound);
  const Tensor y = layer(randn({2, 16, 7, 7}));
  CHECK(y.shape() == Shape{2, 8, 14, 14});
  CHECK(layer.extra_repr() == "16, 8, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)");
  nn::ConvTranspose2d plain(nn::ConvTranspose2dOptions{4, 6, {3, 2}}.with_groups(2).with_bias(false).with_output_padding(
      {0, 1}).with_stride({1, 2}).with_dtype(DType::Float64));
  CHECK(plain.weight.shape() == Shape{4, 3, 3, 2});
  CHECK(!plain.bias.defined());
  CHECK(plain.weight.dtype() == DType::Float64);
  CHECK(plain.extra_repr() == "4, 6, kernel_size=(3, 2), stride=(1, 2), output_padding=(0, 1), groups=2, bias=false");
  const auto copy = std::dynamic_pointer_cast<nn::ConvTranspose2d>(layer.clone());
  REQUIRE(copy);
  CHECK(tapegrad::testing::identical(copy->weight, layer.weight));
  CHECK_THROWS_WITH(layer(randn({2, 3, 7, 7})), "ConvTranspose2d: expected input [N, 16, H, W], got [2, 3, 7, 7]");
  CHECK_THROWS_WITH(nn::ConvTranspose2d(nn::ConvTranspose2dOptions{4, 4, 3}.with_output_padding(1)),
                    "ConvTranspose2d: output_padding (1, 1) must be non-negative and smaller than stride (1, 1)");
}
