// conv2d and nn::Conv2d: a direct-convolution reference, gradients of every input over random options,
// second derivatives, closed-form kernels, error messages, and the layer's init, printing and clone.
#include <cmath>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

struct Options {
  IntPair stride = 1, padding = 0, dilation = 1;
  std::int64_t groups = 1;
};

// The textbook seven-loop cross-correlation, in double, with nothing shared with the library's kernel.
Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Options& o) {
  const auto n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const auto oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const auto og = oc / o.groups;
  const auto oh = (h + 2 * o.padding.h - o.dilation.h * (kh - 1) - 1) / o.stride.h + 1;
  const auto ow = (wd + 2 * o.padding.w - o.dilation.w * (kw - 1) - 1) / o.stride.w + 1;
  (void)c;
  const auto xv = x.to_vector(), wv = w.to_vector();
  std::vector<double> out(static_cast<std::size_t>(n * oc * oh * ow));
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t f = 0; f < oc; ++f)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double total = b.defined() ? b.at({f}) : 0.0;
          const std::int64_t group = f / og;
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t ki = 0; ki < kh; ++ki)
              for (std::int64_t kj = 0; kj < kw; ++kj) {
                const std::int64_t ih = i * o.stride.h - o.padding.h + ki * o.dilation.h;
                const std::int64_t iw = j * o.stride.w - o.padding.w + kj * o.dilation.w;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const std::int64_t channel = group * cg + ci;
                total += xv[static_cast<std::size_t>(((s * x.size(1) + channel) * h + ih) * wd + iw)] *
                         wv[static_cast<std::size_t>(((f * cg + ci) * kh + ki) * kw + kj)];
              }
          out[static_cast<std::size_t>(((s * oc + f) * oh + i) * ow + j)] = total;
        }
  return from_vector(out, {n, oc, oh, ow}, TensorOptions{}.with_dtype(x.dtype()));
}

// A random convolution problem: options first, then extents large enough for at least one output.
struct Problem {
  Options options;
  Tensor x, w, b;
};

rc::Gen<Problem> problem(std::int64_t max_channels_per_group = 2, std::int64_t max_batch = 2) {
  return rc::gen::exec([=] {
    Problem p;
    Options& o = p.options;
    o.groups = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto cg = *rc::gen::inRange<std::int64_t>(1, max_channels_per_group + 1);
    const auto og = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto kh = *rc::gen::inRange<std::int64_t>(1, 4), kw = *rc::gen::inRange<std::int64_t>(1, 4);
    o.stride = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    o.padding = {*rc::gen::inRange<std::int64_t>(0, 3), *rc::gen::inRange<std::int64_t>(0, 3)};
    o.dilation = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    const auto min_h = std::max<std::int64_t>(1, o.dilation.h * (kh - 1) + 1 - 2 * o.padding.h);
    const auto min_w = std::max<std::int64_t>(1, o.dilation.w * (kw - 1) + 1 - 2 * o.padding.w);
    const auto h = min_h + *rc::gen::inRange<std::int64_t>(0, 3), w = min_w + *rc::gen::inRange<std::int64_t>(0, 3);
    const auto n = *rc::gen::inRange<std::int64_t>(1, max_batch + 1);
    p.x = *gen::tensor_of_shape({n, cg * o.groups, h, w});
    p.w = *gen::tensor_of_shape({og * o.groups, cg, kh, kw});
    if (*rc::gen::arbitrary<bool>()) p.b = *gen::tensor_of_shape({og * o.groups});
    return p;
  });
}

Tensor run(const Problem& p, const Tensor& x, const Tensor& w, const Tensor& b) {
  const Options& o = p.options;
  return conv2d(x, w, b, o.stride, o.padding, o.dilation, o.groups);
}

std::vector<Tensor> inputs_of(const Problem& p) {
  std::vector<Tensor> inputs{p.x, p.w};
  if (p.b.defined()) inputs.push_back(p.b);
  return inputs;
}

}  // namespace

TEST_CASE("conv2d matches a direct convolution for random shapes and options") {
  rc::prop("forward", [] {
    const Problem p = *problem(3, 3);
    RC_ASSERT(allclose(run(p, p.x, p.w, p.b), reference_conv(p.x, p.w, p.b, p.options), 1e-10, 1e-10));
  });
}

TEST_CASE("conv2d gradients w.r.t. input, weight and bias match finite differences") {
  rc::prop("gradcheck", [] {
    const Problem p = *problem();
    TAPEGRAD_RC_GRADCHECK(([&p](const std::vector<Tensor>& v) {
                            return run(p, v[0], v[1], v.size() > 2 ? v[2] : Tensor());
                          }),
                          inputs_of(p));
  });
}

TEST_CASE("conv2d second derivatives match finite differences") {
  rc::prop("gradgradcheck", [] {
    const Problem p = *problem(1, 1);
    TAPEGRAD_RC_GRADGRADCHECK(([&p](const std::vector<Tensor>& v) {
                                return run(p, v[0], v[1], v.size() > 2 ? v[2] : Tensor());
                              }),
                              inputs_of(p));
  });
}

TEST_CASE("conv2d's gradient ops have the right gradients themselves") {
  rc::prop("input_grad and weight_grad", [] {
    const Problem p = *problem(1, 1);
    const Options& o = p.options;
    const Tensor y = run(p, p.x, p.w, Tensor());
    const Tensor g = *gen::tensor_of_shape(y.shape());
    const Shape xs = p.x.shape(), ws = p.w.shape();
    TAPEGRAD_RC_GRADCHECK(([&](const std::vector<Tensor>& v) {
                            return conv2d_input_grad(v[0], v[1], xs, o.stride, o.padding, o.dilation, o.groups);
                          }),
                          (std::vector<Tensor>{g, p.w}));
    TAPEGRAD_RC_GRADCHECK(([&](const std::vector<Tensor>& v) {
                            return conv2d_weight_grad(v[0], v[1], ws, o.stride, o.padding, o.dilation, o.groups);
                          }),
                          (std::vector<Tensor>{p.x, g}));
  });
}

TEST_CASE("batched, multi-threaded and 1x1 paths agree with the direct convolution, forward and backward") {
  // Big enough that the kernels split the batch over threads; the reference gradients come from the
  // direct convolution's own definition: <g, conv(x, w)> is bilinear, so its gradients are exact sums.
  Generator gen(7);
  const std::vector<std::pair<std::int64_t, Options>> cases{
      {3, {1, 1, 1, 1}}, {1, {1, 0, 1, 1}}, {3, {2, 1, 2, 2}}, {1, {2, 0, 1, 2}}};
  for (const auto& [kernel, o] : cases) {
    const Tensor x = randn({5, 4, 11, 9}, gen, f64().with_requires_grad());
    const Tensor w = randn({6, 4 / o.groups, kernel, kernel}, gen, f64().with_requires_grad());
    const Tensor b = randn({6}, gen, f64().with_requires_grad());
    const Tensor y = conv2d(x, w, b, o.stride, o.padding, o.dilation, o.groups);
    REQUIRE(allclose(y, reference_conv(x.detach(), w.detach(), b.detach(), o), 1e-10, 1e-10));
    const Tensor g = randn(y.shape(), gen, f64());
    y.backward(g);
    // d<g, conv(x, w)>/dx[e] is the convolution of a one-hot input with w, dotted with g; checking a
    // handful of elements of each gradient this way keeps the reference independent of the library.
    for (std::int64_t e : {0L, 17L, 123L, x.numel() - 1}) {
      std::vector<double> onehot(static_cast<std::size_t>(x.numel()), 0.0);
      onehot[static_cast<std::size_t>(e)] = 1.0;
      const Tensor dy = reference_conv(from_vector(onehot, x.shape(), f64()), w.detach(), Tensor(), o);
      CHECK(x.grad().to_vector()[static_cast<std::size_t>(e)] == Approx(sum(dy * g).item()).epsilon(1e-10));
    }
    for (std::int64_t e = 0; e < w.numel(); e += 5) {
      std::vector<double> onehot(static_cast<std::size_t>(w.numel()), 0.0);
      onehot[static_cast<std::size_t>(e)] = 1.0;
      const Tensor dy = reference_conv(x.detach(), from_vector(onehot, w.shape(), f64()), Tensor(), o);
      CHECK(w.grad().to_vector()[static_cast<std::size_t>(e)] == Approx(sum(dy * g).item()).epsilon(1e-10));
    }
    CHECK(allclose(b.grad(), sum(g, {0, 2, 3}), 1e-10, 1e-10));
  }
}

TEST_CASE("float32 conv2d agrees with float64") {
  Generator gen(3);
  const Tensor x = randn({4, 3, 12, 12}, gen, f64());
  const Tensor w = randn({8, 3, 3, 3}, gen, f64());
  const Tensor b = randn({8}, gen, f64());
  const Tensor y64 = conv2d(x, w, b, 1, 1);
  const Tensor y32 = conv2d(x.to(DType::Float32), w.to(DType::Float32), b.to(DType::Float32), 1, 1);
  CHECK(y32.dtype() == DType::Float32);
  CHECK(allclose(y32.to(DType::Float64), y64, 1e-4, 1e-4));
}

TEST_CASE("a 3x3 kernel with a known pattern gives the hand-computed output") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, f64());
  // A centred one-hot kernel with padding 1 is the identity.
  const Tensor identity = tensor({0, 0, 0, 0, 1, 0, 0, 0, 0}, {1, 1, 3, 3}, f64());
  CHECK(conv2d(x, identity, Tensor(), 1, 1).to_vector() == x.to_vector());
  // A 2x2 box sums each window: [[1+2+4+5, 2+3+5+6], [4+5+7+8, 5+6+8+9]], plus a bias of 0.5.
  const Tensor box = ones({1, 1, 2, 2}, f64());
  CHECK(conv2d(x, box, tensor({0.5}, {1}, f64())).to_vector() == std::vector<double>{12.5, 16.5, 24.5, 28.5});
  // Cross-correlation, not convolution: the kernel is not flipped.
  const Tensor right = tensor({0, 1}, {1, 1, 1, 2}, f64());
  CHECK(conv2d(x, right).to_vector() == std::vector<double>{2, 3, 5, 6, 8, 9});
  // Stride 2 with padding 1 on the 3x3 box picks the corner windows.
  CHECK(conv2d(x, ones({1, 1, 3, 3}, f64()), Tensor(), 2, 1).to_vector() == std::vector<double>{12, 16, 24, 28});
}

TEST_CASE("an unbatched [C, H, W] input is a batch of one") {
  Generator gen(1);
  const Tensor x = randn({2, 5, 5}, gen, f64()), w = randn({3, 2, 3, 3}, gen, f64());
  const Tensor y = conv2d(x, w, Tensor(), 1, 1);
  CHECK(y.shape() == Shape{3, 5, 5});
  CHECK(allclose(y, conv2d(x.reshape({1, 2, 5, 5}), w, Tensor(), 1, 1).reshape({3, 5, 5})));
}

TEST_CASE("conv2d is one record on the tape") {
  const Tensor x = ones({1, 1, 4, 4}, f64().with_requires_grad());
  const Tensor w = ones({2, 1, 3, 3}, f64().with_requires_grad());
  const Tensor b = ones({2}, f64().with_requires_grad());
  const auto before = tape_size();
  const Tensor y = conv2d(x, w, b);
  CHECK(tape_size() == before + 1);
  CHECK(y.grad_fn_name() == "conv2d");
}

TEST_CASE("conv2d names the problem and the shapes") {
  const Tensor x = zeros({8, 1, 28, 28});
  CHECK_THROWS_WITH(conv2d(x, zeros({32, 3, 3, 3})),
                    "conv2d: weight [32, 3, 3, 3] expects 3 input channels (groups=1), but input [8, 1, 28, 28] has 1");
  CHECK_THROWS_WITH(conv2d(zeros({28, 28}), zeros({32, 1, 3, 3})),
                    "conv2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got [28, 28]");
  CHECK_THROWS_WITH(conv2d(x, zeros({32, 1, 3, 3}), zeros({31})),
                    "conv2d: bias [31] must be [32], one value per output channel");
  CHECK_THROWS_WITH(conv2d(zeros({1, 4, 5, 5}), zeros({5, 2, 3, 3}), Tensor(), 1, 0, 1, 2),
                    "conv2d: weight [5, 2, 3, 3] has 5 output channels, not divisible by groups=2");
  CHECK_THROWS_WITH(conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})),
                    "conv2d: input [1, 1, 2, 2] padded to 2 x 2 is smaller than the dilated kernel 3 x 3");
  CHECK_THROWS_WITH(conv2d(x, zeros({1, 1, 3, 3}), Tensor(), 0), "conv2d: stride must be positive, got (0, 0)");
  CHECK_THROWS_WITH(conv2d(x, zeros({1, 1, 3, 3}, f64())),
                    "conv2d: input is float32 and weight is float64; expected the same float dtype");
  CHECK_THROWS_WITH(conv2d_input_grad(zeros({8, 2, 26, 26}), zeros({1, 1, 3, 3}), x.shape()),
                    "conv2d_input_grad: grad_output [8, 2, 26, 26] does not match the convolution's output shape "
                    "[8, 1, 26, 26]");
}

// ---- nn::Conv2d ----

TEST_CASE("Conv2d registers weight [out, in/groups, kh, kw] and bias [out]") {
  nn::Conv2d conv(nn::Conv2dOptions{4, 6, {3, 2}}.with_groups(2));
  const auto named = conv.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[0].second.shape() == Shape{6, 2, 3, 2});
  CHECK(named[1].first == "bias");
  CHECK(named[1].second.shape() == Shape{6});
  nn::Conv2d no_bias(nn::Conv2dOptions{4, 6, 3}.with_bias(false));
  CHECK(no_bias.parameters().size() == 1);
  CHECK_FALSE(no_bias.bias.defined());
}

TEST_CASE("Conv2d initialises weight and bias uniformly within 1/sqrt(fan_in), reproducibly") {
  Generator a(42), b(42);
  nn::Conv2d first(nn::Conv2dOptions{8, 16, 3}.with_generator(a).with_dtype(DType::Float64));
  nn::Conv2d second(nn::Conv2dOptions{8, 16, 3}.with_generator(b).with_dtype(DType::Float64));
  CHECK(first.weight.to_vector() == second.weight.to_vector());
  CHECK(first.bias.to_vector() == second.bias.to_vector());
  const double bound = 1.0 / std::sqrt(8.0 * 9.0);
  for (const Tensor& t : {first.weight, first.bias}) {
    double largest = 0;
    for (double v : t.to_vector()) {
      CHECK(std::abs(v) <= bound);
      largest = std::max(largest, std::abs(v));
    }
    CHECK(largest > 0.8 * bound);  // the whole interval is used, not a narrower one
  }
  // The weight's spread is that of U(-bound, bound): variance bound^2 / 3.
  CHECK(mean(first.weight * first.weight).item() == Approx(bound * bound / 3).epsilon(0.1));
}

TEST_CASE("Conv2d forward equals conv2d with its parameters") {
  Generator gen(5);
  nn::Conv2d conv(nn::Conv2dOptions{2, 3, 3}.with_stride(2).with_padding(1).with_dilation({1, 2}).with_generator(gen));
  const Tensor x = randn({2, 2, 7, 8}, gen);
  const Tensor expected = conv2d(x, conv.weight, conv.bias, 2, 1, {1, 2});
  CHECK(conv(x).to_vector() == expected.to_vector());
}

TEST_CASE("Conv2d checks the input's channels") {
  nn::Conv2d conv(3, 8, 3);
  CHECK_THROWS_WITH(conv(zeros({8, 1, 28, 28})), "Conv2d: expected input [N, 3, H, W], got [8, 1, 28, 28]");
  CHECK_THROWS_WITH(conv(zeros({1, 28, 28})), "Conv2d: expected unbatched input [3, H, W], got [1, 28, 28]");
  CHECK_THROWS_WITH(conv(zeros({28, 28})), "Conv2d: expected input [N, 3, H, W] or [3, H, W], got [28, 28]");
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions{3, 8, 3}.with_groups(2)),
                    "Conv2d: groups=2 must be positive and divide in_channels=3 and out_channels=8");
}

TEST_CASE("Conv2d prints like PyTorch") {
  CHECK(nn::Conv2d(nn::Conv2dOptions{1, 32, 3}.with_padding(1)).extra_repr() ==
        "1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)");
  CHECK(nn::Conv2d(nn::Conv2dOptions{4, 8, {3, 5}}.with_stride(2).with_dilation(2).with_groups(4).with_bias(false))
            .extra_repr() == "4, 8, kernel_size=(3, 5), stride=(2, 2), dilation=(2, 2), groups=4, bias=false");
}

TEST_CASE("Conv2d clone is an independent copy") {
  nn::Conv2d conv(nn::Conv2dOptions{2, 4, 3}.with_padding(1));
  auto copy = std::dynamic_pointer_cast<nn::Conv2d>(conv.clone());
  REQUIRE(copy);
  CHECK(copy->extra_repr() == conv.extra_repr());
  CHECK(copy->weight.to_vector() == conv.weight.to_vector());
  CHECK(copy->bias.to_vector() == conv.bias.to_vector());
  const Tensor x = randn({1, 2, 5, 5});
  CHECK(copy->forward(x).to_vector() == conv(x).to_vector());
  {
    NoGradGuard no_grad;
    copy->weight.fill_(0.0);
  }
  CHECK_FALSE(conv.weight.to_vector() == copy->weight.to_vector());
}

TEST_CASE("Conv2d trains: a gradient step lowers the loss") {
  Generator gen(11);
  nn::Conv2d conv(nn::Conv2dOptions{1, 2, 3}.with_padding(1).with_generator(gen).with_dtype(DType::Float64));
  const Tensor x = randn({4, 1, 6, 6}, gen, f64()), target = randn({4, 2, 6, 6}, gen, f64());
  auto loss_of = [&] { return mean(square(conv(x) - target)); };
  const double before = loss_of().item();
  loss_of().backward();
  {
    NoGradGuard no_grad;
    conv.weight.add_(conv.weight.grad(), -0.1);
    conv.bias.add_(conv.bias.grad(), -0.1);
  }
  CHECK(loss_of().item() < before);
}
