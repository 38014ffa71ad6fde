// Elementwise ops: gradient properties (first and second order), closed-form values, masks, messages.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

/// A unary op under test with the value range and kinks its gradient property should use.
struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> f;
  double low = -2.0, high = 2.0;
  std::vector<double> kinks = {};
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, 0.2, 2.0},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }, 0.3, 2.0},
      {"pow 1", [](const Tensor& x) { return pow(x, 1.0); }},
      {"pow 0", [](const Tensor& x) { return pow(x, 0.0); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 3.0},
      {"square", [](const Tensor& x) { return square(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.3, 2.0},
      {"abs", [](const Tensor& x) { return abs(x); }, -2.0, 2.0, {0.0}},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"clamp both", [](const Tensor& x) { return clamp(x, -0.5, 0.75); }, -2.0, 2.0, {-0.5, 0.75}},
      {"clamp min", [](const Tensor& x) { return clamp(x, 0.25, std::nullopt); }, -2.0, 2.0, {0.25}},
      {"clamp max", [](const Tensor& x) { return clamp(x, std::nullopt, -0.25); }, -2.0, 2.0, {-0.25}},
      {"relu", [](const Tensor& x) { return relu(x); }, -2.0, 2.0, {0.0}},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }, -2.0, 2.0, {0.0}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -5.0, 5.0},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -3.0, 3.0},
      {"softplus", [](const Tensor& x) { return softplus(x); }, -5.0, 5.0},
      {"softplus beta 2 threshold 1", [](const Tensor& x) { return softplus(x, 2.0, 1.0); }, -3.0, 3.0, {0.5}},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -3.0, 3.0},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximate::Tanh); }, -3.0, 3.0},
  };
}

// Every case, paired with (x * x) so that piecewise-linear ops have a second derivative too.
Tensor unary_then_smooth(const UnaryCase& c, const Tensor& x) { return mul(c.f(x), x); }

}  // namespace

TEST_CASE("unary elementwise gradients match finite differences") {
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    CHECK(rc::check(c.name, [&c] {
      const Tensor x = *gen::tensor(3, 4, c.low, c.high, c.kinks);
      TAPEGRAD_RC_GRADCHECK([&c](const std::vector<Tensor>& in) { return c.f(in[0]); }, (std::vector<Tensor>{x}));
    }));
  }
}

TEST_CASE("unary elementwise second derivatives match finite differences") {
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    CHECK(rc::check(c.name, [&c] {
      const Tensor x = *gen::tensor(2, 3, c.low, c.high, c.kinks);
      TAPEGRAD_RC_GRADGRADCHECK([&c](const std::vector<Tensor>& in) { return unary_then_smooth(c, in[0]); },
                                (std::vector<Tensor>{x}));
    }));
  }
}

TEST_CASE("the fused first-order backward and the create_graph backward give the same gradient") {
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    CHECK(rc::check(c.name, [&c] {
      const Tensor values = *gen::tensor(3, 4, c.low, c.high, c.kinks);
      Tensor x = values.clone().requires_grad_();
      const Tensor upstream = randn(values.shape(), default_generator(), f64());
      const Tensor plain = autograd::grad({c.f(x)}, {x}, {upstream})[0];
      const Tensor composed = autograd::grad({c.f(x)}, {x}, {upstream}, false, /*create_graph=*/true)[0];
      RC_ASSERT(allclose(plain, composed.detach(), 1e-12, 1e-14));
    }));
  }
}

TEST_CASE("where and masked_fill gradients are right for broadcast shapes") {
  rc::prop("where(mask, a, b)", [] {
    const auto shapes = *gen::broadcast_pair();
    Shape mask_shape = shapes.first;
    const auto ones_at = *rc::gen::container<std::vector<bool>>(mask_shape.size(), rc::gen::arbitrary<bool>());
    for (std::size_t i = 0; i < mask_shape.size(); ++i)
      if (ones_at[i]) mask_shape[i] = 1;
    const Tensor mask = gt(*gen::tensor_of_shape(mask_shape, -1.0, 1.0), 0.0);
    const Tensor a = *gen::tensor_of_shape(shapes.first);
    const Tensor b = *gen::tensor_of_shape(shapes.second);
    TAPEGRAD_RC_GRADCHECK([mask](const std::vector<Tensor>& in) { return where(mask, in[0], in[1]); },
                          (std::vector<Tensor>{a, b}));
    TAPEGRAD_RC_GRADGRADCHECK(
        [mask](const std::vector<Tensor>& in) { return where(mask, mul(in[0], in[0]), exp(in[1])); },
        (std::vector<Tensor>{a, b}));
  });
  rc::prop("masked_fill(x, mask, value)", [] {
    const auto shapes = *gen::broadcast_pair();
    const Shape x_shape = broadcast_shapes(shapes.first, shapes.second, "test");
    const Tensor mask = gt(*gen::tensor_of_shape(shapes.second, -1.0, 1.0), 0.0);
    const Tensor x = *gen::tensor_of_shape(x_shape);
    const double value = *gen::value();
    TAPEGRAD_RC_GRADCHECK([&](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, value); },
                          (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return masked_fill(tanh(in[0]), mask, value); },
                              (std::vector<Tensor>{x}));
  });
}

TEST_CASE("comparisons agree with scalar comparisons under broadcasting and never require grad") {
  rc::prop("eq ne lt le gt ge", [] {
    const auto shapes = *gen::broadcast_pair();
    // positive values all become 1, so that equal pairs occur on both sides
    Tensor a = *gen::tensor_of_shape(shapes.first, -2.0, 2.0);
    Tensor b = *gen::tensor_of_shape(shapes.second, -2.0, 2.0);
    a = masked_fill(a, gt(a, 0.0), 1.0).requires_grad_();
    b = masked_fill(b, gt(b, 0.0), 1.0);
    const Tensor ab = broadcast_to(a.detach(), broadcast_shapes(a.shape(), b.shape(), "test"));
    const Tensor bb = broadcast_to(b, ab.shape());
    const std::vector<double> va = ab.to_vector(), vb = bb.to_vector();
    using Cmp = Tensor (*)(const Tensor&, const Tensor&);
    const std::vector<std::pair<Cmp, std::function<bool(double, double)>>> cases = {
        {eq, std::equal_to<double>()}, {ne, std::not_equal_to<double>()}, {lt, std::less<double>()},
        {le, std::less_equal<double>()}, {gt, std::greater<double>()}, {ge, std::greater_equal<double>()}};
    for (const auto& [op, reference] : cases) {
      const Tensor m = op(a, b);
      RC_ASSERT(!m.requires_grad());
      RC_ASSERT(m.dtype() == DType::Float64);
      RC_ASSERT(m.shape() == ab.shape());
      const std::vector<double> vm = m.to_vector();
      for (std::size_t i = 0; i < vm.size(); ++i) RC_ASSERT(vm[i] == (reference(va[i], vb[i]) ? 1.0 : 0.0));
    }
  });
}

TEST_CASE("tensor-scalar comparisons, and int64 comparisons give int64 masks") {
  const Tensor x = tensor({-1.0, 0.0, 2.5}, {3});
  CHECK(eq(x, 0.0).to_vector() == std::vector<double>{0, 1, 0});
  CHECK(ne(x, 0.0).to_vector() == std::vector<double>{1, 0, 1});
  CHECK(lt(x, 0.0).to_vector() == std::vector<double>{1, 0, 0});
  CHECK(le(x, 0.0).to_vector() == std::vector<double>{1, 1, 0});
  CHECK(gt(x, 0.0).to_vector() == std::vector<double>{0, 0, 1});
  CHECK(ge(x, 2.5).to_vector() == std::vector<double>{0, 0, 1});
  CHECK(gt(x, 0.0).dtype() == DType::Float32);
  CHECK(eq(tensor({0.1}, {1}), 0.1).item() == 1.0);  // the scalar is rounded to float32 first, as PyTorch
  const Tensor labels = from_vector(std::vector<std::int64_t>{1, 2, 3}, {3});
  const Tensor predicted = from_vector(std::vector<std::int64_t>{1, 0, 3}, {3});
  const Tensor hits = eq(labels, predicted);
  CHECK(hits.dtype() == DType::Int64);
  CHECK(hits.to_vector() == std::vector<double>{1, 0, 1});
  CHECK(lt(labels, 2.5).to_vector() == std::vector<double>{1, 1, 0});
}

TEST_CASE("sigmoid, softplus and gelu match known values and stay finite at extremes") {
  const Tensor x = tensor({0.0, -1000.0, 1000.0, 1.0}, {4}, f64());
  const auto s = sigmoid(x).to_vector();
  CHECK(s[0] == 0.5);
  CHECK(s[1] == 0.0);
  CHECK(s[2] == 1.0);
  CHECK(s[3] == Approx(0.7310585786300049).epsilon(1e-14));
  const auto sp = softplus(x).to_vector();
  CHECK(sp[0] == Approx(std::log(2.0)).epsilon(1e-14));
  CHECK(sp[1] == 0.0);
  CHECK(sp[2] == 1000.0);  // above the threshold softplus is exactly x
  CHECK(sp[3] == Approx(1.3132616875182228).epsilon(1e-14));
  CHECK(softplus(tensor({15.0}, {1}, f64()), 2.0).item() == 15.0);  // beta x = 30 > 20
  CHECK(softplus(tensor({5.0}, {1}, f64()), 2.0).item() == Approx(std::log1p(std::exp(10.0)) / 2).epsilon(1e-14));
  const Tensor g = tensor({1.0, -1.0, -0.5}, {3}, f64());
  const auto exact = gelu(g).to_vector();
  CHECK(exact[0] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(exact[1] == Approx(-0.15865525393145707).epsilon(1e-14));
  const auto approx = gelu(g, "tanh").to_vector();
  CHECK(approx[0] == Approx(0.8411919906082768).epsilon(1e-14));
  CHECK(approx[2] == Approx(-0.15428599017485606).epsilon(1e-14));
  CHECK(gelu(g, "none").to_vector() == exact);
  // the backward of sigmoid at large |x| must not be NaN
  Tensor big = tensor({-1000.0, 1000.0}, {2}, f64_grad());
  sum(sigmoid(big)).backward();
  CHECK(big.grad().to_vector() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("kinks: relu and abs have gradient 0 at 0, clamp passes the gradient at its bounds") {
  Tensor x = tensor({0.0, -1.0, 2.0}, {3}, f64_grad());
  sum(relu(x)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0.0, 0.0, 1.0});
  x.set_grad(Tensor());
  sum(abs(x)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0.0, -1.0, 1.0});
  x.set_grad(Tensor());
  sum(clamp(x, -1.0, 1.0)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1.0, 1.0, 0.0});
  CHECK(clamp(x, -1.0, 1.0).to_vector() == std::vector<double>{0.0, -1.0, 1.0});
  CHECK(leaky_relu(x).to_vector() == std::vector<double>{0.0, -0.01, 2.0});
  CHECK(sign(tensor({-3.0, 0.0, 0.5}, {3})).to_vector() == std::vector<double>{-1.0, 0.0, 1.0});
  CHECK_FALSE(sign(x).requires_grad());
}

TEST_CASE("relu follows PyTorch on NaN and on infinite gradients, at every length, both backward paths") {
  // torch 1.13: relu([nan, -1, 2, 0]) = [nan, 0, 2, 0]; with upstream [inf, inf, 1, 5] the gradient is
  // [inf, 0, 1, 0] (threshold_backward keeps g unless x <= 0; a product g * 0 would give NaN).
  const double nan = std::nan(""), inf = INFINITY;
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const bool create_graph : {false, true}) {
      Tensor x = tensor({nan, -1.0, 2.0, 0.0}, {4}, TensorOptions{}.with_dtype(dtype).with_requires_grad());
      const Tensor y = relu(x);
      const std::vector<double> values = y.to_vector();
      CHECK(std::isnan(values[0]));
      CHECK(std::vector<double>(values.begin() + 1, values.end()) == std::vector<double>{0.0, 2.0, 0.0});
      y.backward(tensor({inf, inf, 1.0, 5.0}, {4}, TensorOptions{}.with_dtype(dtype)), false, create_graph);
      CHECK(x.grad().to_vector() == std::vector<double>{inf, 0.0, 1.0, 0.0});
    }
  // Every length up to a few vectors of the widest instruction set, so vector bodies and scalar tails both run,
  // and one long enough to be split across threads.
  Generator gen(3);
  std::vector<std::int64_t> lengths(70);
  std::iota(lengths.begin(), lengths.end(), std::int64_t{0});
  lengths.push_back(200'003);
  for (const std::int64_t n : lengths) {
    Tensor x = randn({n}, gen, f64_grad());
    const Tensor g = randn({n}, gen, f64());
    relu(x).backward(g);
    const std::vector<double> xs = x.to_vector(), gs = g.to_vector(), ys = relu(x.detach()).to_vector();
    const std::vector<double> dx = n == 0 ? std::vector<double>{} : x.grad().to_vector();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CHECK(ys[i] == std::max(xs[i], 0.0));
      CHECK(dx[i] == (xs[i] > 0 ? gs[i] : 0.0));
    }
  }
}

TEST_CASE("where selects by broadcast mask and keeps an infinite gradient out of the other branch") {
  const Tensor mask = tensor({1.0, 0.0}, {2, 1});
  Tensor a = tensor({1.0, 2.0, 3.0}, {3}, f64_grad());
  Tensor b = tensor({-1.0}, {1}, f64_grad());
  Tensor y = where(mask, a, b);
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector() == std::vector<double>{1, 2, 3, -1, -1, -1});
  const double inf = std::numeric_limits<double>::infinity();
  y.backward(tensor({inf, 1, 1, 1, 1, 1}, {2, 3}, f64()));
  CHECK(a.grad().to_vector() == std::vector<double>{inf, 1.0, 1.0});
  CHECK(b.grad().to_vector() == std::vector<double>{3.0});  // not NaN
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, f64_grad());
  Tensor filled = masked_fill(x, tensor({0.0, 1.0}, {2}), -5.0);
  CHECK(filled.to_vector() == std::vector<double>{1, -5, 3, -5});
  sum(filled).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 1, 0});
}

TEST_CASE("elementwise ops reject bad input with the op and the shapes") {
  CHECK_THROWS_WITH(clamp(zeros({2}), 1.0, 0.0), "clamp: min 1 is greater than max 0");
  CHECK_THROWS_WITH(gelu(zeros({2}), "fast"), "gelu: approximate must be \"none\" or \"tanh\", got \"fast\"");
  CHECK_THROWS_WITH(pow(zeros({2}, TensorOptions{}.with_dtype(DType::Int64)), 2.0),
                    "pow: expected a float32 or float64 tensor, got int64");
  CHECK_THROWS_WITH(lt(zeros({2, 3}), zeros({2})), "lt: shapes [2, 3] and [2] cannot be broadcast (dim 1: 3 vs 2)");
  CHECK_THROWS_WITH(eq(zeros({2}), zeros({2}, f64())),
                    "eq: dtype mismatch between [2] float32 and [2] float64");
  CHECK_THROWS_WITH(where(ones({3}), zeros({2, 3}), zeros({4})),
                    "where: shapes [2, 3] and [4] cannot be broadcast (dim 1: 3 vs 4)");
  CHECK_THROWS_WITH(where(ones({4}), zeros({2, 3}), zeros({3})), Catch::StartsWith("where: shapes [4] and [2, 3]"));
  CHECK_THROWS_WITH(masked_fill(zeros({3}), ones({2, 3}), 1.0),
                    "masked_fill: mask of shape [2, 3] does not broadcast to the input's shape [3]");
  CHECK_THROWS_WITH(softplus(zeros({1}), 0.0), "softplus: beta must be non-zero");
}
