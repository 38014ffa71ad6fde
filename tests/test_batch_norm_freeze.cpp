// Frozen BatchNorm: eval behaviour that survives a parent's train(), parameters no optimizer moves, running
// statistics that never change, and a flag that round-trips through save and load.
#include <sstream>

#include <tapegrad/framework/serialize/checkpoint.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

const TensorOptions kDouble = TensorOptions{}.with_dtype(DType::Float64);

/// Linear -> BatchNorm1d -> ReLU -> Linear -> BatchNorm1d, in float64; returns the model.
std::shared_ptr<nn::Sequential> make_model(std::int64_t in, std::int64_t width, std::uint64_t seed) {
  Generator g(seed);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions{in, width}.with_generator(g)),
      std::make_shared<nn::BatchNorm1d>(width), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions{width, 2}.with_generator(g)), std::make_shared<nn::BatchNorm1d>(2)});
  model->to(DType::Float64);
  return model;
}

/// Every parameter and buffer of `module`, cloned.
std::vector<Tensor> snapshot(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : module.named_parameters()) out.push_back(t.detach().clone());
  for (const auto& [name, t] : module.named_buffers()) out.push_back(t.detach().clone());
  return out;
}

bool all_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!identical(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("a frozen BatchNorm's parameters and buffers are bit-identical after training steps under a parent's train()") {
  rc::prop("frozen layer untouched by SGD and Adam steps", [](bool use_adam, bool stale_grad) {
    const auto in = *rc::gen::inRange<std::int64_t>(1, 5);
    const auto width = *rc::gen::inRange<std::int64_t>(1, 6);
    const auto seed = *rc::gen::arbitrary<std::uint32_t>();
    auto model = make_model(in, width, seed);
    auto frozen = model->at_as<nn::BatchNorm1d>(1);
    auto other = model->at_as<nn::BatchNorm1d>(4);
    Generator g(seed + 1);
    // Give the layer non-trivial statistics and parameters first, and (optionally) a grad left over from
    // before freezing, which must not leak into an update.
    model->train();
    const Tensor warmup = randn({8, in}, g, kDouble);
    sum((*model)(warmup) * (*model)(warmup)).backward();
    if (!stale_grad) model->zero_grad();
    frozen->freeze();
    model->train();  // the parent's train() must not undo the freeze
    RC_ASSERT(frozen->frozen());
    RC_ASSERT(!frozen->is_training());
    RC_ASSERT(other->is_training());
    RC_ASSERT(!frozen->weight.requires_grad());
    RC_ASSERT(!frozen->weight.grad().defined());

    const std::vector<Tensor> before = snapshot(*frozen);
    const std::vector<Tensor> other_before = snapshot(*other);
    std::unique_ptr<optim::Optimizer> optimizer;
    if (use_adam)
      optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.1, .weight_decay = 0.1});
    else
      optimizer = std::make_unique<optim::SGD>(model->parameters(),
                                               optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      optimizer->zero_grad(false);
      const Tensor x = randn({6, in}, g, kDouble);
      const Tensor y = (*model)(x);
      sum(y * y * randn({6, 2}, g, kDouble)).backward();
      optimizer->step();
    }
    RC_ASSERT(all_identical(before, snapshot(*frozen)));
    RC_ASSERT(!all_identical(other_before, snapshot(*other)));  // the rest of the model did train
  });
}

TEST_CASE("a frozen BatchNorm normalizes with its running statistics inside a training model") {
  auto model = make_model(3, 4, 7);
  auto bn = model->at_as<nn::BatchNorm1d>(1);
  model->train();
  Generator g(3);
  for (int i = 0; i < 3; ++i) (*model)(randn({5, 3}, g, kDouble));
  bn->freeze();
  model->train();
  NoGradGuard no_grad;
  const Tensor h = (*model->at(0))(randn({5, 3}, g, kDouble));
  const Tensor expected = batch_norm_eval(h, bn->running_mean, bn->running_var, bn->weight, bn->bias, 1e-5);
  CHECK(identical((*bn)(h), expected));
}

TEST_CASE("unfreeze() restores trainable parameters and the mode the parent last asked for") {
  nn::BatchNorm2d bn(nn::BatchNormOptions{.num_features = 3, .frozen = true});
  CHECK(bn.frozen());
  CHECK(!bn.is_training());
  CHECK(!bn.weight.requires_grad());
  CHECK(bn.parameter_count(true) == 0);
  CHECK(bn.extra_repr().ends_with("frozen=true"));
  bn.train();
  CHECK(!bn.is_training());
  bn.unfreeze();
  CHECK(bn.is_training());
  CHECK(bn.weight.requires_grad());
  CHECK(bn.bias.requires_grad());
  bn.eval();
  bn.freeze();
  bn.unfreeze();
  CHECK(!bn.is_training());
}

TEST_CASE("clone() of a frozen BatchNorm is frozen") {
  nn::BatchNorm1d bn(4);
  bn.freeze();
  auto copy = std::dynamic_pointer_cast<nn::BatchNorm1d>(bn.clone());
  REQUIRE(copy);
  CHECK(copy->frozen());
  copy->train();
  CHECK(!copy->is_training());
  CHECK(!copy->weight.requires_grad());
}

TEST_CASE("the frozen flag round-trips through save and load, in both directions") {
  for (ArchiveKind kind : {ArchiveKind::Binary, ArchiveKind::Text}) {
    auto saved = make_model(3, 4, 1);
    saved->at_as<nn::BatchNorm1d>(4)->freeze();
    std::stringstream file;
    save(*saved, file, kind);

    auto fresh = make_model(3, 4, 2);
    fresh->at_as<nn::BatchNorm1d>(1)->freeze();  // frozen here, not in the file: loading unfreezes it
    load(*fresh, file);
    auto loaded_frozen = fresh->at_as<nn::BatchNorm1d>(4);
    CHECK(loaded_frozen->frozen());
    CHECK(!loaded_frozen->weight.requires_grad());
    fresh->train();
    CHECK(!loaded_frozen->is_training());
    CHECK(!fresh->at_as<nn::BatchNorm1d>(1)->frozen());
    CHECK(fresh->at_as<nn::BatchNorm1d>(1)->is_training());
    CHECK(all_identical(snapshot(*saved), snapshot(*fresh)));
  }
}

TEST_CASE("a state saved before the frozen flag existed (BatchNorm state version 2) loads as unfrozen") {
  auto source = make_model(2, 3, 5);
  nn::NamedTensors old_state;
  for (const auto& [name, t] : source->state())
    if (!name.ends_with("frozen")) old_state.emplace_back(name, t);
  std::map<std::string, int> versions = source->state_versions();
  versions.at("1") = 2;
  versions.at("4") = 2;
  auto target = make_model(2, 3, 6);
  target->at_as<nn::BatchNorm1d>(1)->freeze();
  const nn::LoadResult result = target->load_state(old_state, true, versions);
  CHECK(result.missing_keys.empty());
  CHECK(!target->at_as<nn::BatchNorm1d>(1)->frozen());
  CHECK(identical(target->at_as<nn::BatchNorm1d>(1)->running_var, source->at_as<nn::BatchNorm1d>(1)->running_var));
  // Without versions (claimed current) the missing flag is a missing key, reported when not strict.
  const nn::LoadResult lenient = target->load_state(old_state, false);
  CHECK(lenient.missing_keys == std::vector<std::string>{"1.frozen", "4.frozen"});
  CHECK_THROWS_AS(target->load_state(old_state, true), Error);
}

TEST_CASE("freeze() drops a grad the parameters held, so unfreeze() does not bring it back") {
  nn::BatchNorm1d bn(2);
  bn.to(DType::Float64);
  sum(bn(randn({4, 2}, default_generator(), kDouble))).backward();
  REQUIRE(bn.bias.grad().defined());
  bn.freeze();
  CHECK(!bn.bias.grad().defined());
  optim::SGD sgd(bn.parameters(), optim::SGDOptions{.lr = 0.5, .weight_decay = 0.1});
  const Tensor before = bn.weight.detach().clone();
  sgd.step();
  CHECK(identical(bn.weight, before));
  bn.unfreeze();
  CHECK(!bn.bias.grad().defined());
  CHECK(!bn.weight.grad().defined());
}
