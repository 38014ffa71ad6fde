// Module holders (issue 39 item 3): a libtorch program's members and calls keep their shape under
// `namespace nn = tapegrad::nn::holders`, and the shared_ptr style keeps working beside it.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"
#include <tapegrad/tapegrad.h>

using tapegrad::Error;
using tapegrad::Shape;
using tapegrad::Tensor;
namespace {

// DOC-BEGIN holders
namespace nn = tapegrad::nn::holders;  // libtorch: namespace nn = torch::nn;

// A residual block as a libtorch program writes it: holder members, one left empty until the constructor
// assigns it, one value-built; then its own holder from TAPEGRAD_MODULE.
struct BlockImpl : nn::Module {
  explicit BlockImpl(std::int64_t channels) : nn::Module("Block") {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions{channels, channels, 3}.with_padding(1)));
    bn = register_module("bn", nn::BatchNorm2d(channels));
    register_module("relu", relu);
  }
  Tensor forward(const Tensor& x) override { return relu(bn(conv(x))) + x; }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::ReLU relu;
};
TAPEGRAD_MODULE(Block);

struct NetImpl : nn::Module {
  NetImpl() : nn::Module("Net") {
    stem = register_module("stem", nn::Conv2d(1, 4, 3));
    blocks = register_module("blocks", nn::Sequential(Block(4)));
    blocks->push_back(Block(4));
    fc = register_module("fc", nn::Linear(4, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = blocks(stem(x));
    return fc(tapegrad::mean(h, {2, 3}));
  }
  nn::Conv2d stem{nullptr};
  nn::Sequential blocks{nullptr};
  nn::Linear fc{nullptr};
};
TAPEGRAD_MODULE(Net);
// DOC-END holders

std::vector<std::string> names(const tapegrad::nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}

}  // namespace

TEST_CASE("a libtorch-shaped model builds, runs and names its state as libtorch", "[module][holder]") {
  Net net;
  REQUIRE_FALSE(net.is_empty());
  const Tensor y = net(tapegrad::ones({2, 1, 6, 6}));
  CHECK(y.shape() == Shape{2, 3});
  const auto state = names(net->state());
  CHECK(state.front() == "stem.weight");
  CHECK(std::find(state.begin(), state.end(), "blocks.1.bn.running_mean") != state.end());
  CHECK(std::find(state.begin(), state.end(), "fc.bias") != state.end());
  // The holder and the registry hold the same module.
  CHECK(net->named_children().back().second.get() == net->fc.get());
  y.sum().backward();
  CHECK(net->fc->weight.grad().defined());
}

TEST_CASE("holders: empty, value-built, shared, converted", "[module][holder]") {
  nn::Linear empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_FALSE(static_cast<bool>(empty));
  CHECK_THROWS_WITH(empty->forward(tapegrad::ones({1, 3})), Catch::Contains("the holder is empty"));
  nn::Module parent;
  CHECK_THROWS_WITH(parent.register_module("fc", empty), Catch::Contains("fc"));

  nn::ReLU relu;  // default-built: holds a module
  CHECK_FALSE(relu.is_empty());
  STATIC_REQUIRE_FALSE(std::is_default_constructible_v<nn::Linear>);  // no default: `{nullptr}` must be written

  nn::Linear fc(3, 4);
  nn::Linear copy = fc;  // copies share the module, as libtorch's
  CHECK(copy.get() == fc.get());
  std::shared_ptr<tapegrad::nn::Linear> handle = fc;
  std::shared_ptr<tapegrad::nn::Module> base = fc;
  CHECK(handle.get() == fc.get());
  CHECK(base.get() == fc.get());
  // The shared_ptr style and holders mix: a shared handle fills a holder, a holder goes into a Sequential.
  nn::Linear from_handle = std::make_shared<tapegrad::nn::Linear>(4, 2);
  tapegrad::nn::Sequential seq(fc, from_handle, std::make_shared<tapegrad::nn::ReLU>());
  CHECK(seq.size() == 3);
  CHECK(seq.at(0).get() == fc.get());
  CHECK(seq(tapegrad::ones({5, 3})).shape() == Shape{5, 2});
}

TEST_CASE("a holder calls whatever forward its module has", "[module][holder]") {
  nn::LSTM lstm(nn::LSTMOptions(3, 5));
  const Tensor x = tapegrad::ones({4, 2, 3});
  CHECK(lstm(x).shape() == Shape{4, 2, 5});
  const auto [output, h_n, c_n] = lstm->forward_with_state(x);
  CHECK(h_n.shape() == Shape{1, 2, 5});
  nn::MultiheadAttention attention(8, 2);
  const Tensor q = tapegrad::ones({3, 1, 8});
  CHECK(attention->forward(q).shape() == Shape{3, 1, 8});
}

TEST_CASE("docs/from_libtorch.md quotes the holders example", "[module][holder][docs]") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_module_holder.cpp", "docs/from_libtorch.md", "holders");
}
