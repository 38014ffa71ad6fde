// Handing modules over by value, as libtorch code does: register_module("fc", nn::Linear(4, 2)) and
// nn::Sequential(nn::Linear(4, 8), nn::ReLU()). A moved module must arrive whole: the handles its class keeps
// (weight, children) and the registries its state, parameters and optimizers read must still be the same tensors.
#include <type_traits>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

std::vector<std::string> names(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}

/// Moves `layer` into a shared handle and checks that it kept its type name, printing, its parameters (the very
/// same leaves) and every state entry (the same storage, not copies).
template <class Layer> void check_moves_whole(Layer layer) {
  static_assert(std::is_move_constructible_v<Layer>);
  static_assert(!std::is_copy_constructible_v<Layer> && !std::is_move_assignable_v<Layer>);
  const std::string repr = layer.repr();
  const nn::NamedTensors state = layer.state();
  const std::vector<Tensor> parameters = layer.parameters();
  auto moved = std::make_shared<Layer>(std::move(layer));
  INFO(repr);
  CHECK(moved->repr() == repr);
  const nn::NamedTensors moved_state = moved->state();
  REQUIRE(names(moved_state) == names(state));
  for (std::size_t i = 0; i < state.size(); ++i) CHECK(moved_state[i].second.raw_data() == state[i].second.raw_data());
  const std::vector<Tensor> moved_parameters = moved->parameters();
  REQUIRE(moved_parameters.size() == parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) CHECK(moved_parameters[i].is_same(parameters[i]));
}

/// The libtorch tutorial's shape of a model, children registered by value.
struct Net : nn::Module {
  Net() : nn::Module("Net") {
    fc1 = register_module("fc1", nn::Linear(6, 8));
    bn = register_module("bn", nn::BatchNorm1d(8));
    fc2 = register_module("fc2", nn::Linear(8, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*bn)((*fc1)(x)))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm1d> bn;
};

}  // namespace

TEST_CASE("every layer moves whole: same state tensors, same printing") {
  check_moves_whole(nn::Linear(4, 3));
  check_moves_whole(nn::Conv2d(nn::Conv2dOptions{2, 3, 3}));
  check_moves_whole(nn::ConvTranspose2d(nn::ConvTranspose2dOptions{3, 2, 4}));
  check_moves_whole(nn::BatchNorm1d(5));
  check_moves_whole(nn::BatchNorm2d(5));
  check_moves_whole(nn::BatchNorm3d(5));
  check_moves_whole(nn::GroupNorm(nn::GroupNormOptions{2, 4}));
  check_moves_whole(nn::InstanceNorm1d(nn::InstanceNormOptions{3}.with_affine(true).with_track_running_stats(true)));
  check_moves_whole(nn::InstanceNorm2d(3));
  check_moves_whole(nn::LayerNorm(Shape{4}));
  check_moves_whole(nn::Embedding(nn::EmbeddingOptions{10, 4}));
  check_moves_whole(nn::Dropout(0.3));
  check_moves_whole(nn::Dropout2d(0.3));
  check_moves_whole(nn::MaxPool2d(IntPair{2, 2}));
  check_moves_whole(nn::AvgPool2d(IntPair{2, 2}));
  check_moves_whole(nn::AdaptiveAvgPool2d(IntPair{1, 1}));
  check_moves_whole(nn::Flatten());
  check_moves_whole(nn::ReLU());
  check_moves_whole(nn::LeakyReLU(0.2));
  check_moves_whole(nn::GELU());
  check_moves_whole(nn::Sigmoid());
  check_moves_whole(nn::Tanh());
  check_moves_whole(nn::Softmax(1));
  check_moves_whole(nn::LogSoftmax(1));
  check_moves_whole(nn::BCELoss());
  check_moves_whole(nn::BCEWithLogitsLoss());
  check_moves_whole(nn::NLLLoss());
  check_moves_whole(nn::CrossEntropyLoss());
  check_moves_whole(nn::Sequential(nn::Linear(2, 2), nn::ReLU()));
  check_moves_whole(Net());
}

TEST_CASE("register_module by value returns the typed handle the registry holds, and training updates it") {
  manual_seed(3);
  auto net = std::make_shared<Net>();
  static_assert(std::is_same_v<decltype(net->fc1), std::shared_ptr<nn::Linear>>);
  CHECK(names(net->named_parameters()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"});
  CHECK(names(net->named_buffers()) ==
        std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked", "bn.frozen"});
  CHECK(net->named_children()[0].second == net->fc1);
  CHECK(net->parameter_count() == 6 * 8 + 8 + 8 + 8 + 8 * 3 + 3);

  // What the optimizer steps (the registry's tensors) is what forward uses (the members): one step changes both.
  optim::SGD optimizer(net->parameters(), optim::SGDOptions{0.5});
  const Tensor before = net->fc1->weight.clone();
  const Tensor x = randn({16, 6});
  const Tensor target = randint(0, 3, {16});
  optimizer.zero_grad();
  cross_entropy((*net)(x), target).backward();
  optimizer.step();
  CHECK_FALSE(identical(net->fc1->weight, before));
  CHECK(net->fc1->weight.is_same(net->named_parameters()[0].second));
  CHECK(net->bn->num_batches_tracked.item() == 1);
}

TEST_CASE("Sequential takes layers by value, as shared handles, or both, in parentheses or braces") {
  manual_seed(5);
  auto shared_tail = std::make_shared<nn::Linear>(8, 2);
  nn::Sequential model(nn::Linear(4, 8), nn::ReLU(), shared_tail);
  CHECK(model.size() == 3);
  CHECK(model[2] == shared_tail);
  CHECK(names(model.named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  const Tensor x = randn({3, 4});
  CHECK(identical(model(x), (*shared_tail)(relu((*model.at_as<nn::Linear>(0))(x)))));

  nn::Sequential braced{nn::Conv2d(nn::Conv2dOptions{1, 2, 3}), nn::BatchNorm2d(2), nn::ReLU(), nn::Flatten()};
  CHECK(braced.size() == 4);
  CHECK(braced(randn({2, 1, 5, 5})).shape() == Shape{2, 18});

  // make_shared forwards the layers, so the usual spelling for a model held by a handle reads the same way.
  auto held = std::make_shared<nn::Sequential>(nn::Linear(3, 3), nn::Tanh());
  CHECK(held->at(1)->type_name() == "Tanh");

  // Nesting goes through a handle; a Sequential given by value is moved, not nested.
  auto nested = nn::Sequential(std::make_shared<nn::Sequential>(nn::Linear(2, 2)), nn::ReLU());
  CHECK(names(nested.named_parameters()) == std::vector<std::string>{"0.0.weight", "0.0.bias"});

  // A named module is not silently moved out of: lvalues are refused at compile time.
  static_assert(!std::is_constructible_v<nn::Sequential, nn::Linear&>);
  static_assert(!std::is_constructible_v<nn::Sequential, const nn::Linear&, nn::ReLU>);
  static_assert(std::is_constructible_v<nn::Sequential, nn::Linear, std::shared_ptr<nn::ReLU>&>);
}

// Note: braces build the layers left to right, as an initializer list does; function arguments (parentheses,
// make_shared) are built in an order C++ leaves to the compiler, so the initial weights drawn from the default
// generator would come out in another order. Braces are what makes "same seed, same model" hold.
TEST_CASE("a braced Sequential built by value is the model built from handles, step for step") {
  rc::prop("same seed, same losses", [] {
    const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
    auto losses = [&](bool by_value) {
      manual_seed(seed);
      std::shared_ptr<nn::Sequential> model =
          by_value ? std::make_shared<nn::Sequential>(
                         nn::Sequential{nn::Linear(5, 7), nn::BatchNorm1d(7), nn::ReLU(), nn::Linear(7, 2)})
                   : std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                         std::make_shared<nn::Linear>(5, 7), std::make_shared<nn::BatchNorm1d>(7),
                         std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(7, 2)});
      optim::Adam optimizer(model->parameters(), optim::AdamOptions{0.01});
      Generator data(seed + 1);
      std::vector<double> out;
      for (int step = 0; step < 3; ++step) {
        const Tensor x = randn({8, 5}, data);
        optimizer.zero_grad();
        Tensor loss = mse_loss((*model)(x), zeros({8, 2}));
        loss.backward();
        optimizer.step();
        out.push_back(loss.item());
      }
      return out;
    };
    RC_ASSERT(losses(true) == losses(false));
  });
}
