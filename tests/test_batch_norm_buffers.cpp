// BatchNorm's buffers: the running statistics' update rules, the testing kit's buffer invariants, and the module
// plumbing around them (registration, printing, clone, old states, error messages).
#include <cmath>
#include <map>

#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// Values of one channel of an [N, C, ...] tensor.
std::vector<double> channel_values(const Tensor& x, std::int64_t c) {
  const std::vector<double> v = x.to_vector();
  const std::int64_t channels = x.size(1), per_n = x.numel() / x.size(0), s = per_n / channels;
  std::vector<double> out;
  for (std::int64_t n = 0; n < x.size(0); ++n)
    for (std::int64_t i = 0; i < s; ++i) out.push_back(v[static_cast<std::size_t>(n * per_n + c * s + i)]);
  return out;
}

std::map<std::string, Tensor> snapshot(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, b] : model.named_buffers()) out[name] = b.detach().clone();
  return out;
}

bool buffers_identical(const nn::Module& model, const std::map<std::string, Tensor>& before) {
  for (const auto& [name, b] : model.named_buffers())
    if (!identical(b, before.at(name))) return false;
  return true;
}

// Checks one BatchNorm layer's buffers after a training forward on `input`, from the buffers before it,
// with mean and unbiased variance computed here by plain loops.
void check_ema_update(const nn::BatchNormBase& bn, const Tensor& input, const Tensor& mean_before,
                      const Tensor& var_before, double tracked_before) {
  const auto& o = bn.options();
  RC_ASSERT(bn.num_batches_tracked.item() == tracked_before + 1);
  RC_ASSERT(bn.num_batches_tracked.dtype() == DType::Int64);
  const double f = o.momentum ? *o.momentum : 1.0 / (tracked_before + 1);
  const auto rm = mean_before.to_vector(), rv = var_before.to_vector();
  std::vector<double> expected_mean, expected_var;
  for (std::int64_t c = 0; c < o.num_features; ++c) {
    const auto v = channel_values(input, c);
    double sum = 0, squares = 0;
    for (double x : v) sum += x;
    const double m = sum / static_cast<double>(v.size());
    for (double x : v) squares += (x - m) * (x - m);
    expected_mean.push_back((1 - f) * rm[static_cast<std::size_t>(c)] + f * m);
    expected_var.push_back((1 - f) * rv[static_cast<std::size_t>(c)] + f * squares / static_cast<double>(v.size() - 1));
  }
  RC_ASSERT(allclose(bn.running_mean, from_vector(expected_mean, {o.num_features}, f64), 1e-12, 1e-13));
  RC_ASSERT(allclose(bn.running_var, from_vector(expected_var, {o.num_features}, f64), 1e-12, 1e-13));
}

// A random BatchNorm option set.
rc::Gen<nn::BatchNormOptions> gen_options(std::int64_t channels) {
  return rc::gen::apply(
      [channels](int momentum_choice, bool affine, bool track, int eps_choice) {
        nn::BatchNormOptions o;
        o.num_features = channels;
        const double momenta[] = {0.1, 0.01, 0.5, 1.0};
        if (momentum_choice < 4) o.momentum = momenta[momentum_choice]; else o.momentum = std::nullopt;
        o.affine = affine;
        o.track_running_stats = track;
        const double epsilons[] = {1e-5, 1e-3, 0.1};
        o.eps = epsilons[eps_choice];
        return o;
      },
      rc::gen::inRange(0, 5), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), rc::gen::inRange(0, 3));
}

// A random stack: [N, F] through Linear-BatchNorm1d-ReLU blocks, or [N, C, H, W] through BatchNorm2d-ReLU.
struct RandomModel {
  std::shared_ptr<nn::Sequential> model;
  Shape input_shape;
};

RandomModel gen_model() {
  RandomModel r;
  r.model = std::make_shared<nn::Sequential>();
  const bool conv_like = *rc::gen::arbitrary<bool>();
  const int blocks = *rc::gen::inRange(1, 4);
  std::int64_t features = *rc::gen::inRange<std::int64_t>(1, 5);
  const std::int64_t batch = *rc::gen::inRange<std::int64_t>(2, 6);
  if (conv_like) {
    r.input_shape = {batch, features, *rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4)};
    for (int i = 0; i < blocks; ++i) {
      r.model->push_back(std::make_shared<nn::BatchNorm2d>(*gen_options(features)));
      r.model->push_back(std::make_shared<nn::ReLU>());
    }
  } else {
    r.input_shape = {batch, features};
    for (int i = 0; i < blocks; ++i) {
      const std::int64_t next = *rc::gen::inRange<std::int64_t>(1, 5);
      r.model->push_back(std::make_shared<nn::Linear>(features, next));
      r.model->push_back(std::make_shared<nn::BatchNorm1d>(*gen_options(next)));
      r.model->push_back(std::make_shared<nn::ReLU>());
      features = next;
    }
  }
  r.model->to(DType::Float64);
  return r;
}

Tensor gen_input(const Shape& shape) {
  return *gen::tensor_of_shape(shape, -3.0, 3.0);
}

// Runs a few training steps so the buffers hold something other than their initial values.
void warm_up(nn::Module& model, const Shape& shape) {
  NoGradGuard no_grad;
  model.train();
  for (int i = 0; i < 2; ++i) model(gen_input(shape));
}

// Runs the Sequential's children one by one in training mode, checking each BatchNorm's update.
void check_training_forward(nn::Sequential& model, const Tensor& input) {
  Tensor h = input;
  for (const auto& child : model) {
    auto bn = std::dynamic_pointer_cast<nn::BatchNormBase>(child);
    if (!bn || !bn->options().track_running_stats) {
      h = (*child)(h);
      continue;
    }
    const Tensor mean_before = bn->running_mean.detach().clone(), var_before = bn->running_var.detach().clone();
    const double tracked = bn->num_batches_tracked.item();
    const Tensor bn_input = h.detach().clone();
    h = (*child)(h);
    check_ema_update(*bn, bn_input, mean_before, var_before, tracked);
  }
}

}  // namespace

TEST_CASE("random BatchNorm stacks keep every buffer rule of the testing kit") {
  // The kit's rules (testing.h) cover eval forwards, backward, NoGradGuard, state() and loading; the model
  // and its input shape are drawn together, the model first.
  auto input_shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make = [input_shape] {
    RandomModel r = gen_model();
    *input_shape = r.input_shape;
    return std::shared_ptr<nn::Module>(r.model);
  };
  tapegrad::testing::check_buffer_invariance(make, rc::gen::exec([input_shape] { return gen_input(*input_shape); }),
                                             {.statistics_of = tapegrad::testing::statistics_present(
                                                  {"running_mean", "running_var", "num_batches_tracked"}),
                                              // Note: a stack may also hold a BatchNorm without running
                                              // statistics, which normalises with the batch's in eval too, so
                                              // eval is not per-sample here (test_testing_kit checks that rule
                                              // on BatchNorm alone).
                                              .per_sample_eval = false});
}

TEST_CASE("running statistics follow the EMA rule, with and without grad mode") {
  rc::prop("a training forward moves running stats by the EMA rule with unbiased variance", [] {
    RandomModel r = gen_model();
    warm_up(*r.model, r.input_shape);
    const Tensor x = gen_input(r.input_shape).requires_grad_(true);
    auto twin = std::dynamic_pointer_cast<nn::Sequential>(r.model->clone());
    check_training_forward(*r.model, x);
    (*twin)(x);  // the Sequential's own forward must do exactly the same
    const auto manual = r.model->named_buffers(), own = twin->named_buffers();
    RC_ASSERT(manual.size() == own.size());
    for (std::size_t i = 0; i < own.size(); ++i) RC_ASSERT(identical(own[i].second, manual[i].second));
  });
  rc::prop("a training forward under NoGradGuard still updates the running stats", [] {
    RandomModel r = gen_model();
    warm_up(*r.model, r.input_shape);
    NoGradGuard no_grad;
    check_training_forward(*r.model, gen_input(r.input_shape));
  });
  rc::prop("after to(float64) the statistics are float64 and the counter and frozen flag 0-dim int64", [] {
    RandomModel r = gen_model();
    for (const auto& [name, b] : r.model->named_buffers()) {
      if (name.ends_with("num_batches_tracked") || name.ends_with("frozen"))
        RC_ASSERT(b.dtype() == DType::Int64 && b.dim() == 0);
      else
        RC_ASSERT(b.dtype() == DType::Float64);
    }
  });
}

TEST_CASE("requires_grad = false on weight and bias does not stop the running statistics; eval does") {
  nn::BatchNorm1d bn(3);
  bn.to(DType::Float64);
  bn.weight.requires_grad_(false);
  bn.bias.requires_grad_(false);
  const Tensor x = randn({5, 3}, default_generator(), f64) * 2.0 + 1.0;
  bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK_FALSE(identical(bn.running_mean, zeros({3}, f64)));
  bn.eval();
  const auto before = snapshot(bn);
  bn(x);
  CHECK(buffers_identical(bn, before));
}

TEST_CASE("momentum unset is the cumulative average of the batch statistics") {
  nn::BatchNormOptions o{2};
  o.momentum = std::nullopt;
  nn::BatchNorm1d bn(o);
  bn.to(DType::Float64);
  std::vector<Tensor> means;
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({6, 2}, default_generator(), f64) + static_cast<double>(i);
    means.push_back(mean(x, {0}));
    bn(x);
  }
  CHECK(allclose(bn.running_mean, (means[0] + means[1] + means[2] + means[3]) / 4.0, 1e-12, 1e-14));
  CHECK(bn.num_batches_tracked.item() == 4);
}

TEST_CASE("track_running_stats = false has no statistics buffers and uses batch statistics in eval") {
  nn::BatchNormOptions o{3};
  o.track_running_stats = false;
  nn::BatchNorm2d bn(o);
  const nn::NamedTensors buffers = bn.named_buffers();
  REQUIRE(buffers.size() == 1);  // only the frozen flag
  CHECK(buffers[0].first == "frozen");
  const Tensor x = randn({2, 3, 2, 2});
  const Tensor train_out = bn(x);
  bn.eval();
  CHECK(identical(bn(x), train_out));
}

// ---------------------------------------------------------------- module plumbing

TEST_CASE("BatchNorm registers PyTorch's parameters and buffers, then its frozen flag") {
  nn::BatchNorm2d bn(4);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state()) names.push_back(name);
  CHECK(names ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked", "frozen"});
  CHECK(bn.buffer("frozen").dtype() == DType::Int64);
  CHECK(bn.buffer("frozen").item() == 0);
  CHECK(bn.weight.to_vector() == std::vector<double>(4, 1.0));
  CHECK(bn.bias.to_vector() == std::vector<double>(4, 0.0));
  CHECK(bn.running_mean.to_vector() == std::vector<double>(4, 0.0));
  CHECK(bn.running_var.to_vector() == std::vector<double>(4, 1.0));
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  nn::BatchNormOptions bare{4};
  bare.affine = false;
  CHECK(nn::BatchNorm1d(bare).parameters().empty());
}

TEST_CASE("BatchNorm prints its options like PyTorch") {
  CHECK(nn::BatchNorm2d(64).extra_repr() == "64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
  nn::BatchNormOptions o{8};
  o.momentum = std::nullopt;
  o.affine = false;
  CHECK(nn::BatchNorm1d(o).extra_repr() == "8, eps=1e-05, momentum=None, affine=false, track_running_stats=true");
}

TEST_CASE("clone gives an independent BatchNorm with the same state and mode") {
  nn::BatchNorm2d bn(2);
  bn(randn({3, 2, 2, 2}) + 4.0);
  bn.eval();
  auto copy = std::dynamic_pointer_cast<nn::BatchNorm2d>(bn.clone());
  REQUIRE(copy);
  CHECK_FALSE(copy->is_training());
  CHECK(identical(copy->running_mean, bn.running_mean));
  CHECK(copy->num_batches_tracked.item() == 1);
  copy->train();
  (*copy)(randn({3, 2, 2, 2}));
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(copy->num_batches_tracked.item() == 2);
}

TEST_CASE("a version-1 state without num_batches_tracked (or the frozen flag) loads with the counter at 0") {
  nn::BatchNorm1d source(3), target(3);
  source(randn({4, 3}));
  nn::NamedTensors old_state;
  for (const auto& [name, t] : source.state())
    if (name != "num_batches_tracked" && name != "frozen") old_state.emplace_back(name, t);
  target(randn({4, 3}));
  CHECK(target.state_versions().at("") == 3);
  CHECK_THROWS_WITH(target.load_state(old_state), Catch::Contains("missing keys num_batches_tracked, frozen"));
  target.freeze();
  target.load_state(old_state, true, {{"", 1}});
  CHECK(target.num_batches_tracked.item() == 0);
  CHECK_FALSE(target.frozen());  // version 1 had no freezing: the layer was not frozen
  CHECK(identical(target.running_var, source.running_var));
}

TEST_CASE("bad inputs to BatchNorm give PyTorch's and tapegrad's messages") {
  nn::BatchNorm1d bn1(4);
  CHECK_THROWS_WITH(bn1(randn({1, 4})),
                    "Expected more than 1 value per channel when training, got input size [1, 4]");
  CHECK_THROWS_WITH(bn1(randn({2, 4, 3, 3})),
                    "BatchNorm1d: expected 2-D input [N, C] or 3-D input [N, C, L], got [2, 4, 3, 3]");
  bn1.eval();
  CHECK_NOTHROW(bn1(randn({1, 4})));  // eval with running statistics needs no batch statistics
  nn::BatchNorm2d bn2(64);
  CHECK_THROWS_WITH(bn2(randn({8, 3})), "BatchNorm2d: expected 4-D input [N, C, H, W], got [8, 3]");
  CHECK_THROWS_WITH(bn2(randn({8, 32, 14, 14})), "BatchNorm2d: expected 64 channels, got input [8, 32, 14, 14]");
  CHECK_THROWS_WITH(bn2(randn({1, 64, 1, 1})),
                    "Expected more than 1 value per channel when training, got input size [1, 64, 1, 1]");
  CHECK_THROWS_WITH(bn2(randn({2, 64, 2, 2}, default_generator(), f64)),
                    Catch::Contains("is float64 but the layer is float32"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(0), "BatchNorm2d: num_features must be positive, got 0");
  CHECK_THROWS_WITH(batch_norm_train(randn({4, 3}), ones({2}), Tensor(), 1e-5),
                    "batch_norm_train: weight must have shape [3] for input [4, 3], got [2]");
}

TEST_CASE("keras_momentum_to_tapegrad converts the old-value weight to the new-batch weight") {
  CHECK(nn::keras_momentum_to_tapegrad(0.99) == Approx(0.01));
  CHECK(nn::keras_momentum_to_tapegrad(0.9) == Approx(0.1));
  CHECK_THROWS_WITH(nn::keras_momentum_to_tapegrad(1.5),
                    "keras_momentum_to_tapegrad: expected a momentum in [0, 1], got 1.5");
}
