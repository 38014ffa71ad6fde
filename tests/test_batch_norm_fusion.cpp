// fuse_batchnorm: folded Conv2d/Linear + BatchNorm pairs compute what the unfused eval model computes, and
// every pattern that cannot be folded is refused by name.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

/// Random statistics and affine parameters, so that folding is tested away from the identity.
void randomize(nn::BatchNormBase& bn, Generator& g) {
  NoGradGuard no_grad;
  const std::int64_t c = bn.options().num_features;
  bn.running_mean.copy_(randn({c}, g));
  bn.running_var.copy_(uniform({c}, 0.2, 3.0, g));
  if (bn.options().affine) {
    bn.weight.copy_(randn({c}, g));
    bn.bias.copy_(randn({c}, g));
  }
}

struct RandomModel {
  std::shared_ptr<nn::Sequential> model;
  Shape input_shape;
};

/// Conv blocks (optionally nested in their own Sequential, with or without conv bias, grouped or not), then
/// Flatten -> Linear -> BatchNorm1d; every BatchNorm has random statistics.
RandomModel gen_model() {
  Generator g(*rc::gen::arbitrary<std::uint32_t>());
  const auto blocks = *rc::gen::inRange(1, 3);
  std::int64_t channels = *rc::gen::inRange<std::int64_t>(1, 3);
  const std::int64_t size = *rc::gen::inRange<std::int64_t>(2, 5);
  const std::int64_t batch = *rc::gen::inRange<std::int64_t>(1, 4);
  auto model = std::make_shared<nn::Sequential>();
  const Shape input_shape{batch, channels, size, size};
  for (int b = 0; b < blocks; ++b) {
    const std::int64_t groups = *rc::gen::element<std::int64_t>(1, channels);
    const std::int64_t out = groups * *rc::gen::inRange<std::int64_t>(1, 3);
    nn::BatchNormOptions bn_options{out};
    bn_options.affine = *rc::gen::arbitrary<bool>();
    bn_options.eps = *rc::gen::element(1e-5, 1e-3, 0.1);
    auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{channels, out, 3}
                                                 .with_padding(1)
                                                 .with_groups(groups)
                                                 .with_bias(*rc::gen::arbitrary<bool>())
                                                 .with_generator(g));
    auto bn = std::make_shared<nn::BatchNorm2d>(bn_options);
    randomize(*bn, g);
    if (*rc::gen::arbitrary<bool>()) {
      auto block = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{conv, bn});
      model->push_back(block);
    } else {
      model->push_back(conv);
      model->push_back(bn);
    }
    model->push_back(std::make_shared<nn::ReLU>());
    channels = out;
  }
  const std::int64_t features = *rc::gen::inRange<std::int64_t>(1, 5);
  model->push_back(std::make_shared<nn::Flatten>());
  model->push_back(std::make_shared<nn::Linear>(
      nn::LinearOptions{channels * size * size, features}.with_bias(*rc::gen::arbitrary<bool>()).with_generator(g)));
  auto bn = model->push_back(std::make_shared<nn::BatchNorm1d>(features));
  randomize(*bn, g);
  return {model, input_shape};
}

std::vector<Tensor> state_copy(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : module.state()) out.push_back(t.clone());
  return out;
}

}  // namespace

TEST_CASE("fused models compute the unfused eval outputs") {
  rc::prop("float64 to 1e-10, float32 to 1e-5", [](bool float64) {
    RandomModel r = gen_model();
    if (float64) r.model->to(DType::Float64);
    r.model->eval();
    const std::vector<Tensor> before = state_copy(*r.model);
    auto fused = nn::fuse_batchnorm(*r.model);
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    const DType dtype = float64 ? DType::Float64 : DType::Float32;
    const Tensor x = randn(r.input_shape, g, TensorOptions{}.with_dtype(dtype));
    NoGradGuard no_grad;
    const Tensor expected = (*r.model)(x), got = (*fused)(x);
    RC_ASSERT(got.dtype() == dtype);
    if (float64)
      RC_ASSERT(allclose(got, expected, 1e-10, 1e-10));
    else
      RC_ASSERT(allclose(got, expected, 1e-5, 1e-5));
    for (auto& [name, module] : fused->named_modules())
      RC_ASSERT(dynamic_cast<nn::BatchNormBase*>(module) == nullptr);
    // The original is untouched.
    const std::vector<Tensor> after = state_copy(*r.model);
    for (std::size_t i = 0; i < before.size(); ++i) RC_ASSERT(identical(before[i], after[i]));
  });
}

TEST_CASE("the fused copy keeps the module names, gives a bias-free Conv2d a bias and is eval-only") {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 2, 3}.with_bias(false)), std::make_shared<nn::BatchNorm2d>(2),
      std::make_shared<nn::ReLU>()});
  model->eval();
  manual_seed(5);
  auto fused = std::dynamic_pointer_cast<nn::Sequential>(nn::fuse_batchnorm(*model));
  const Tensor after_fusing = rand({4});
  manual_seed(5);
  CHECK(identical(after_fusing, rand({4})));  // building the fused layers drew nothing from the default generator
  REQUIRE(fused);
  REQUIRE(fused->size() == 3);
  CHECK(fused->at_as<nn::Conv2d>(0)->bias.defined());
  CHECK(fused->at(1)->type_name() == "FoldedBatchNorm");
  CHECK(fused->at(1)->extra_repr() == "folded_into=Conv2d");
  CHECK(!fused->is_training());
  fused->train();
  CHECK_THROWS_WITH((*fused)(randn({1, 1, 4, 4})), Catch::Contains("eval-only"));
  auto copy = fused->clone();  // a fused model can be cloned like any other
  copy->eval();
  NoGradGuard no_grad;
  const Tensor x = randn({2, 1, 4, 4});
  CHECK(allclose((*copy)(x), (*model)(x), 1e-5, 1e-5));
}

TEST_CASE("fuse_batchnorm refuses what it cannot fold, naming the layer") {
  auto conv = [] { return std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, 2, 3}); };
  auto bn2d = [] { return std::make_shared<nn::BatchNorm2d>(2); };
  auto eval_seq = [](std::initializer_list<std::shared_ptr<nn::Module>> modules) {
    auto s = std::make_shared<nn::Sequential>(modules);
    s->eval();
    return s;
  };
  SECTION("a model in training mode") {
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{conv(), bn2d()});
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*model), Catch::Contains("training mode") && Catch::Contains("eval()"));
  }
  SECTION("a BatchNorm first in its Sequential") {
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*eval_seq({bn2d(), conv()})),
                      Catch::Contains("BatchNorm2d '0' does not directly follow a Conv2d"));
  }
  SECTION("a BatchNorm after an activation") {
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*eval_seq({conv(), std::make_shared<nn::ReLU>(), bn2d()})),
                      Catch::Contains("'2'") && Catch::Contains("follows ReLU"));
  }
  SECTION("a BatchNorm1d after a Conv2d") {
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*eval_seq({conv(), std::make_shared<nn::BatchNorm1d>(2)})),
                      Catch::Contains("does not directly follow a Linear"));
  }
  SECTION("a channel mismatch") {
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*eval_seq({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(5)})),
                      Catch::Contains("5 channels") && Catch::Contains("4 outputs"));
  }
  SECTION("a BatchNorm without running statistics") {
    nn::BatchNormOptions o{2};
    o.track_running_stats = false;
    CHECK_THROWS_WITH(nn::fuse_batchnorm(*eval_seq({conv(), std::make_shared<nn::BatchNorm2d>(o)})),
                      Catch::Contains("track_running_stats = false"));
  }
  SECTION("a BatchNorm that is not inside a Sequential") {
    nn::BatchNorm1d bn(3);
    bn.eval();
    CHECK_THROWS_WITH(nn::fuse_batchnorm(bn), Catch::Contains("not inside a Sequential"));
  }
  SECTION("a Linear fold fed 3-D activations at run time") {
    auto fused = nn::fuse_batchnorm(*eval_seq({std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::BatchNorm1d>(2)}));
    NoGradGuard no_grad;
    CHECK_THROWS_WITH((*fused)(randn({4, 2, 3})), Catch::Contains("only for [N, C]"));
    CHECK((*fused)(randn({4, 3})).shape() == Shape{4, 2});
  }
}

TEST_CASE("a frozen BatchNorm inside an eval model folds like any other") {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions{.num_features = 2, .frozen = true})});
  model->eval();
  Generator g(1);
  randomize(*model->at_as<nn::BatchNorm1d>(1), g);
  auto fused = nn::fuse_batchnorm(*model);
  NoGradGuard no_grad;
  const Tensor x = randn({5, 3});
  CHECK(allclose((*fused)(x), (*model)(x), 1e-5, 1e-5));
}
