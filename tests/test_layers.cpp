// Layers: options and defaults, initialisation, printing, shape errors, and float64 gradient properties
// through the layers' own ops with their parameters as inputs.
#include <cmath>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {
TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
std::vector<std::string> names(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}
}  // namespace

// ---- Linear ----

TEST_CASE("Linear has weight [out, in] and bias [out] initialised within 1/sqrt(in)") {
  Generator g(1);
  nn::Linear layer(nn::LinearOptions{300, 40}.with_generator(g));
  CHECK(layer.weight.shape() == Shape{40, 300});
  CHECK(layer.bias.shape() == Shape{40});
  CHECK(names(layer.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(layer.buffers().empty());
  const double bound = 1.0 / std::sqrt(300.0);
  for (const Tensor& p : layer.parameters()) {
    const auto v = p.to_vector();
    CHECK(*std::max_element(v.begin(), v.end()) <= bound);
    CHECK(*std::min_element(v.begin(), v.end()) >= -bound);
    CHECK(*std::max_element(v.begin(), v.end()) > 0.9 * bound);
  }
  nn::Linear no_bias(nn::LinearOptions{3, 2, false});
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
}

TEST_CASE("Linear computes x W^T + b over the last dim") {
  nn::Linear layer(nn::LinearOptions{2, 3}.with_dtype(DType::Float64));
  {
    NoGradGuard no_grad;
    layer.weight.copy_(tensor({1, 2, 3, 4, 5, 6}, {3, 2}, f64()));
    layer.bias.copy_(tensor({10, 20, 30}, {3}, f64()));
  }
  const Tensor x = tensor({1, 1, 2, 0, 0, 0, -1, 1}, {2, 2, 2}, f64());
  CHECK(allclose(layer(x), tensor({13, 27, 41, 12, 26, 40, 10, 20, 30, 11, 21, 31}, {2, 2, 3}, f64())));
}

TEST_CASE("Linear reports a wrong input width and dtype") {
  nn::Linear layer(784, 10);
  CHECK_THROWS_WITH(layer(zeros({8, 100})), "Linear: expected input [..., 784], got [8, 100]");
  CHECK_THROWS_WITH(layer(zeros({784}, f64())),
                    "Linear: input is float64 but the layer's parameters are float32 (convert one with .to())");
  CHECK(layer(zeros({784})).shape() == Shape{10});
}

TEST_CASE("the same generator seed gives the same Linear") {
  Generator a(5), b(5);
  nn::Linear x(nn::LinearOptions{4, 3}.with_generator(a)), y(nn::LinearOptions{4, 3}.with_generator(b));
  CHECK(identical(x.weight, y.weight));
  CHECK(identical(x.bias, y.bias));
}

TEST_CASE("Linear gradients are right in input, weight and bias") {
  rc::prop("random widths and batch shapes", [] {
    const auto in = *rc::gen::inRange<std::int64_t>(1, 5), out = *rc::gen::inRange<std::int64_t>(1, 5);
    Shape batch = *gen::shape(0, 2);
    Shape x_shape = batch;
    x_shape.push_back(in);
    const bool with_bias = *rc::gen::arbitrary<bool>();
    nn::Linear layer(nn::LinearOptions{in, out, with_bias});
    layer.to(DType::Float64);
    const Tensor x = *gen::tensor_of_shape(x_shape);
    // through the layer's op with its parameters as inputs (the module itself: test_testing_kit)
    std::vector<Tensor> inputs{x, layer.weight.detach()};
    if (with_bias) inputs.push_back(layer.bias.detach());
    auto f = [with_bias](const std::vector<Tensor>& v) { return linear(v[0], v[1], with_bias ? v[2] : Tensor()); };
    TAPEGRAD_RC_GRADCHECK(f, inputs);
    TAPEGRAD_RC_GRADGRADCHECK(f, inputs);
  });
}

// ---- activations and Flatten ----

TEST_CASE("activation modules apply their ops and print their options") {
  const Tensor x = tensor({-2, -0.5, 0.5, 2}, {2, 2}, f64());
  CHECK(identical(nn::ReLU()(x), relu(x)));
  CHECK(identical(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)));
  CHECK(identical(nn::GELU("tanh")(x), gelu(x, GeluApproximate::Tanh)));
  CHECK(identical(nn::GELU()(x), gelu(x)));
  CHECK(identical(nn::Sigmoid()(x), sigmoid(x)));
  CHECK(identical(nn::Tanh()(x), tanh(x)));
  CHECK(identical(nn::Softmax(1)(x), softmax(x, 1)));
  CHECK(identical(nn::LogSoftmax(-1)(x), log_softmax(x, -1)));
  CHECK(nn::LeakyReLU().extra_repr() == "negative_slope=0.01");
  CHECK(nn::GELU("tanh").extra_repr() == "approximate='tanh'");
  CHECK(nn::Softmax(1).extra_repr() == "dim=1");
  CHECK_THROWS_WITH(nn::GELU("fast"), "GELU: approximate must be 'none' or 'tanh', got 'fast'");
  for (auto m : std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>(), std::make_shared<nn::Tanh>()}) {
    CHECK(m->parameters().empty());
    CHECK(m->buffers().empty());
  }
}

TEST_CASE("Flatten merges start_dim..end_dim and checks its dims") {
  CHECK(nn::Flatten()(zeros({8, 3, 4, 5})).shape() == Shape{8, 60});
  CHECK(nn::Flatten(0, 1)(zeros({8, 3, 4})).shape() == Shape{24, 4});
  CHECK(nn::Flatten(-2)(zeros({2, 3, 4})).shape() == Shape{2, 12});
  CHECK(nn::Flatten().extra_repr() == "start_dim=1, end_dim=-1");
  CHECK_THROWS_WITH(nn::Flatten()(zeros({5})), "Flatten: cannot flatten dims 1..-1 of an input of shape [5]");
  Tensor x = tensor({1, 2, 3, 4}, {1, 2, 2}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  sum(mul(nn::Flatten()(x), tensor({1, 2, 3, 4}, {1, 4}, f64()))).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1, 2, 3, 4});
}

// ---- Dropout ----

TEST_CASE("Dropout is the identity in eval mode") {
  nn::Dropout drop(0.5);
  drop.eval();
  const Tensor x = randn({4, 5});
  CHECK(drop(x).is_same(x));
}

TEST_CASE("Dropout in training drops about p and scales the rest by 1/(1-p)") {
  for (double p : {0.1, 0.5, 0.8}) {
    nn::Dropout drop(nn::DropoutOptions{}.with_p(p).with_seed(123));
    const Tensor x = full({20000}, 2.0, f64());
    const auto y = drop(x).to_vector();
    std::int64_t zeros_seen = 0, wrongly_scaled = 0;
    for (double v : y) {
      if (v == 0.0)
        ++zeros_seen;
      else if (std::abs(v - 2.0 / (1.0 - p)) > 1e-14)
        ++wrongly_scaled;
    }
    CHECK(wrongly_scaled == 0);
    CHECK(static_cast<double>(zeros_seen) / 20000.0 == Approx(p).margin(0.015));
  }
}

TEST_CASE("Dropout masks are reproducible from the seed and fresh on every call") {
  nn::Dropout a(nn::DropoutOptions{}.with_seed(9)), b(nn::DropoutOptions{}.with_seed(9));
  const Tensor x = ones({100});
  const Tensor first = a(x);
  CHECK(identical(first, b(x)));
  CHECK_FALSE(identical(first, a(x)));
  auto copy = std::dynamic_pointer_cast<nn::Dropout>(a.clone());
  CHECK(identical(copy->forward(x), a(x)));  // the clone continues the same stream
}

TEST_CASE("Dropout's stream position is state: a fresh layer loaded with it draws the next mask") {
  nn::Dropout a(nn::DropoutOptions{}.with_seed(9)), fresh(nn::DropoutOptions{}.with_seed(9));
  CHECK(names(a.state()) == std::vector<std::string>{"mask_seed", "num_masks_drawn"});
  const Tensor x = ones({100});
  a(x);
  a(x);
  a.eval();
  a(x);  // eval mode draws nothing
  a.train();
  CHECK(a.num_masks_drawn.item() == 2.0);
  fresh.load_state(a.state());
  CHECK(identical(fresh(x), a(x)));
  CHECK(identical(fresh(x), a(x)));
}

TEST_CASE("a version-1 Dropout state (no stream position) loads and starts the stream from the seed") {
  nn::Dropout old_layer(nn::DropoutOptions{}.with_seed(4)), reference(nn::DropoutOptions{}.with_seed(4));
  const Tensor x = ones({64});
  old_layer(x);
  old_layer.load_state({}, /*strict=*/true, {{"", 1}});
  CHECK(old_layer.num_masks_drawn.item() == 0.0);
  CHECK(identical(old_layer(x), reference(x)));
  CHECK(old_layer.state_versions().at("") == 3);
}

TEST_CASE("a version-2 Dropout state (no seed) keeps the layer's own seed and stream position") {
  nn::Dropout old_layer(nn::DropoutOptions{}.with_seed(4)), reference(nn::DropoutOptions{}.with_seed(4));
  const Tensor x = ones({64});
  reference(x);
  old_layer.load_state({{"num_masks_drawn", reference.num_masks_drawn.clone()}}, /*strict=*/true, {{"", 2}});
  CHECK(old_layer.seed() == 4u);
  CHECK(identical(old_layer(x), reference(x)));
}

// Note: at p = 0.5 two independent masks of 4000 elements differ in 2000 places on average (standard
// deviation ~32); the same mask differs in none.
std::int64_t mask_differences(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < va.size(); ++i) differ += (va[i] == 0.0) != (vb[i] == 0.0);
  return differ;
}

TEST_CASE("manual_seed decides every Dropout mask, and two layers draw independent masks") {
  const Tensor x = ones({4000});
  auto build_and_draw = [&](std::uint64_t seed) {
    manual_seed(seed);
    auto model = std::make_shared<nn::Sequential>(
        std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Dropout>(0.5),
                                                            std::make_shared<nn::Dropout>(0.5)});
    auto first = std::dynamic_pointer_cast<nn::Dropout>(model->children()[0]);
    auto second = std::dynamic_pointer_cast<nn::Dropout>(model->children()[1]);
    return std::pair{first->forward(x), second->forward(x)};
  };
  const auto [a1, a2] = build_and_draw(7);
  const auto [b1, b2] = build_and_draw(7);
  const auto [c1, c2] = build_and_draw(8);
  CHECK(identical(a1, b1));  // same seed: same masks
  CHECK(identical(a2, b2));
  const std::int64_t between_layers = mask_differences(a1, a2);
  CHECK(between_layers > 1800);
  CHECK(between_layers < 2200);
  const std::int64_t between_seeds = mask_differences(a1, c1);
  CHECK(between_seeds > 1800);
  CHECK(between_seeds < 2200);
}

TEST_CASE("Dropout seeds differ between layers for many seeds (property)") {
  rc::prop("independent masks", [](std::uint64_t seed) {
    manual_seed(seed);
    nn::Dropout first(0.5), second(0.5);
    RC_ASSERT(first.seed() != second.seed());
    const Tensor x = ones({2000});
    const std::int64_t differ = mask_differences(first(x), second(x));
    RC_ASSERT(differ > 800);  // mean 1000, standard deviation ~22
    RC_ASSERT(differ < 1200);
  });
}

TEST_CASE("Dropout backward is g * mask / (1 - p), and p is validated") {
  nn::Dropout drop(0.25);
  Tensor x = ones({50}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  Tensor y = drop(x);
  sum(mul(y, 3.0)).backward();
  CHECK(allclose(x.grad(), mul(y.detach(), 3.0)));  // x is 1, so y is exactly mask / (1 - p)
  CHECK_THROWS_WITH(nn::Dropout(1.5), "Dropout: probability has to be between 0 and 1, but got 1.5");
  CHECK_THROWS_WITH(dropout(x, -0.1, true), "dropout: probability has to be between 0 and 1, but got -0.1");
  CHECK(sum(abs(dropout(x, 1.0, true))).item() == 0.0);
  CHECK(nn::Dropout(0.3).extra_repr() == "p=0.3");
}

TEST_CASE("dropout gradients are right for a fixed mask") {
  rc::prop("random shapes and p", [] {
    const Tensor x = *gen::tensor();
    const double p = *rc::gen::element(0.0, 0.2, 0.5, 0.9);
    const auto seed = *rc::gen::arbitrary<std::uint32_t>();
    // Note: a fresh generator per call replays the same mask for every finite-difference evaluation.
    auto f = [p, seed](const std::vector<Tensor>& v) {
      Generator g(seed);
      return dropout(v[0], p, true, g);
    };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(([p, seed](const std::vector<Tensor>& v) {
                                Generator g(seed);
                                return dropout(mul(v[0], v[0]), p, true, g);
                              }),
                              (std::vector<Tensor>{x}));
  });
}

// ---- LayerNorm ----

TEST_CASE("LayerNorm normalises each sample and has no buffers") {
  nn::LayerNorm norm(nn::LayerNormOptions{{3}}.with_dtype(DType::Float64));
  CHECK(names(norm.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(norm.buffers().empty());
  CHECK(norm.weight.to_vector() == std::vector<double>{1, 1, 1});
  CHECK(norm.bias.to_vector() == std::vector<double>{0, 0, 0});
  const Tensor x = tensor({1, 2, 3, 10, 10, 13}, {2, 3}, f64());
  const double s0 = std::sqrt(2.0 / 3 + 1e-5), s1 = std::sqrt(2.0 + 1e-5);
  const Tensor expected = tensor({-1 / s0, 0, 1 / s0, -1 / s1, -1 / s1, 2 / s1}, {2, 3}, f64());
  CHECK(allclose(norm(x), expected, 1e-12));
  norm.eval();
  CHECK(allclose(norm(x), expected, 1e-12));  // eval changes nothing: statistics are per sample
  CHECK(norm.extra_repr() == "normalized_shape=[3], eps=1e-05, elementwise_affine=true");
  CHECK_THROWS_WITH(norm(zeros({2, 4}, f64())), "LayerNorm: expected input [*, 3], got [2, 4]");
  CHECK_THROWS_WITH(layer_norm(zeros({2, 4}), {3, 4}),
                    "layer_norm: expected input [*, 3, 4] for normalized_shape [3, 4], got [2, 4]");
  nn::LayerNorm plain(nn::LayerNormOptions{{2, 3}}.with_elementwise_affine(false));
  CHECK(plain.parameters().empty());
  CHECK(plain.state().empty());
}

TEST_CASE("layer_norm gradients are right in input, weight and bias") {
  rc::prop("random shapes, normalised dims and affine options", [] {
    const Shape shape = *gen::shape(1, 3);
    const auto k = *rc::gen::inRange<std::size_t>(1, shape.size() + 1);
    const Shape normalized(shape.end() - static_cast<std::ptrdiff_t>(k), shape.end());
    const bool with_weight = *rc::gen::arbitrary<bool>(), with_bias = *rc::gen::arbitrary<bool>();
    const double eps = *rc::gen::element(1e-5, 0.1);
    std::vector<Tensor> inputs{*gen::tensor_of_shape(shape)};
    if (with_weight) inputs.push_back(*gen::tensor_of_shape(normalized));
    if (with_bias) inputs.push_back(*gen::tensor_of_shape(normalized));
    // Note: a row of near-equal values has a variance near 0, where 1/sqrt(var + eps) is steep; eps = 1e-5
    // is then checked only on rows with some spread, which random values from a grid of 1e-3 give.
    auto f = [=](const std::vector<Tensor>& v) {
      return layer_norm(v[0], normalized, with_weight ? v[1] : Tensor(), with_bias ? v[with_weight ? 2 : 1] : Tensor(),
                        eps);
    };
    TAPEGRAD_RC_GRADCHECK(f, inputs);
    TAPEGRAD_RC_GRADGRADCHECK(f, inputs);
  });
}

TEST_CASE("layer_norm fused and recorded backward paths agree") {
  rc::prop("first derivatives with and without create_graph", [] {
    const Shape shape = *gen::shape(1, 3);
    const Shape normalized{shape.back()};
    Tensor x = (*gen::tensor_of_shape(shape)).requires_grad_();
    Tensor w = (*gen::tensor_of_shape(normalized)).requires_grad_();
    Tensor b = (*gen::tensor_of_shape(normalized)).requires_grad_();
    Tensor g = *gen::tensor_of_shape(shape);
    Tensor y = layer_norm(x, normalized, w, b);
    const auto fast = autograd::grad({y}, {x, w, b}, {g}, /*retain_graph=*/true);
    const auto recorded = autograd::grad({y}, {x, w, b}, {g}, false, /*create_graph=*/true);
    for (std::size_t i = 0; i < 3; ++i) RC_ASSERT(allclose(fast[i], recorded[i].detach(), 1e-9, 1e-11));
  });
}

// ---- Sequential ----

TEST_CASE("Sequential names children 0, 1, ... and prints like PyTorch") {
  nn::Sequential model({std::make_shared<nn::Linear>(784, 10), std::make_shared<nn::ReLU>()});
  auto last = model.push_back(std::make_shared<nn::Linear>(nn::LinearOptions{10, 2, false}));
  static_assert(std::is_same_v<decltype(last), std::shared_ptr<nn::Linear>>);
  CHECK(model.size() == 3);
  CHECK(names(model.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight"});
  CHECK(model[2] == last);
  CHECK(model.at_as<nn::Linear>(0)->options().in_features == 784);
  CHECK_THROWS_WITH(model.at_as<nn::Linear>(1), "Sequential: module 1 is a ReLU, not the requested type");
  CHECK_THROWS_WITH(model.at(3), "Sequential: index 3 is out of range for a Sequential of size 3");
  CHECK(model.repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=784, out_features=10, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=10, out_features=2, bias=false)\n"
        ")\n"
        "parameters: 7870 (7870 trainable), buffers: 0 tensors (0 elements)");
}

TEST_CASE("Sequential chains forward, and an empty one is the identity") {
  auto a = std::make_shared<nn::Linear>(3, 4);
  auto b = std::make_shared<nn::Tanh>();
  nn::Sequential model({a, b});
  const Tensor x = randn({2, 3});
  CHECK(identical(model(x), tanh((*a)(x))));
  nn::Sequential empty;
  CHECK(empty(x).is_same(x));
  CHECK_THROWS_WITH(empty.push_back(std::shared_ptr<nn::Module>()),
                    "Sequential: cannot append a null module at index 0");
}

TEST_CASE("Sequential clone is deep and keeps training flags") {
  nn::Sequential model({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Dropout>(0.5),
                        std::make_shared<nn::LayerNorm>(Shape{4})});
  model.at(1)->eval();
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(model.clone());
  REQUIRE(copy);
  CHECK(copy->repr() == model.repr());
  CHECK(names(copy->state()) == names(model.state()));
  for (std::size_t i = 0; i < model.state().size(); ++i) {
    CHECK(identical(copy->state()[i].second, model.state()[i].second));
    CHECK_FALSE(copy->state()[i].second.is_same(model.state()[i].second));
  }
  CHECK(copy->is_training());
  CHECK_FALSE(copy->at(1)->is_training());
  {
    NoGradGuard no_grad;
    copy->at_as<nn::Linear>(0)->weight.fill_(7.0);
  }
  CHECK(model.at_as<nn::Linear>(0)->weight.to_vector() != copy->at_as<nn::Linear>(0)->weight.to_vector());
}

TEST_CASE("a Sequential MLP in float64 has the right input gradients") {
  rc::prop("Linear, activations, LayerNorm", [] {
    const auto width = *rc::gen::inRange<std::int64_t>(1, 5), hidden = *rc::gen::inRange<std::int64_t>(2, 5);
    nn::Sequential model({std::make_shared<nn::Linear>(width, hidden), std::make_shared<nn::Tanh>(),
                          std::make_shared<nn::LayerNorm>(Shape{hidden}), std::make_shared<nn::GELU>(),
                          std::make_shared<nn::Linear>(hidden, 3), std::make_shared<nn::LogSoftmax>(1)});
    model.to(DType::Float64);
    const Tensor x = *gen::tensor_of_shape({*rc::gen::inRange<std::int64_t>(1, 4), width});
    TAPEGRAD_RC_GRADCHECK([&](const std::vector<Tensor>& v) { return model(v[0]); }, (std::vector<Tensor>{x}));
  });
}

TEST_CASE("counters loaded from a damaged state are refused before they can overflow") {
  nn::Dropout drop(0.5);
  *drop.num_masks_drawn.data<std::int64_t>() = INT64_MAX;
  CHECK_THROWS_WITH(drop(ones({4})), Catch::Contains("num_masks_drawn is 9223372036854775807"));
  *drop.num_masks_drawn.data<std::int64_t>() = -3;
  CHECK_THROWS_WITH(drop(ones({4})), Catch::Contains("num_masks_drawn is -3"));
  nn::BatchNorm1d norm(2);
  for (std::int64_t bad : {INT64_MAX, std::int64_t{-1}}) {
    *norm.num_batches_tracked.data<std::int64_t>() = bad;
    const Tensor mean_before = norm.running_mean.clone();
    CHECK_THROWS_WITH(norm(randn({4, 2})), Catch::Contains("num_batches_tracked is " + std::to_string(bad)));
    CHECK(identical(norm.running_mean, mean_before));
  }
}
