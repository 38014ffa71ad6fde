// Module registries: names, traversal order, parameters vs buffers, mode, dtype, state, clone.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::nn::Module;

namespace {
// A minimal layer with one parameter, one persistent and one non-persistent buffer.
class Scale : public Module {
 public:
  explicit Scale(std::int64_t n) : Module("Scale"), n_(n) {
    weight = register_parameter("weight", ones({n}));
    count = register_buffer("count", zeros({1}, TensorOptions{}.with_dtype(DType::Int64)));
    running = register_buffer("running", zeros({n}));
    scratch = register_buffer("scratch", zeros({n}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& x) override { return x * weight; }
  std::string extra_repr() const override { return fmt::format("{}", n_); }
  std::shared_ptr<Module> clone() const override { return clone_into(std::make_shared<Scale>(n_)); }
  Tensor weight, count, running, scratch;

 private:
  std::int64_t n_;
};

class Pair : public Module {
 public:
  Pair() : Module("Pair") {
    first = register_module("first", std::make_shared<Scale>(2));
    second = register_module("second", std::make_shared<Scale>(3));
    bias = register_parameter("bias", zeros({1}));
  }
  std::shared_ptr<Module> clone() const override { return clone_into(std::make_shared<Pair>()); }
  std::shared_ptr<Scale> first, second;
  Tensor bias;
};

std::vector<std::string> names(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}
}  // namespace

TEST_CASE("named traversal is recursive, dotted and in registration order") {
  Pair model;
  CHECK(names(model.named_parameters()) == std::vector<std::string>{"bias", "first.weight", "second.weight"});
  CHECK(names(model.named_buffers()) ==
        std::vector<std::string>{"first.count", "first.running", "first.scratch", "second.count", "second.running",
                                 "second.scratch"});
  CHECK(names(model.state()) == std::vector<std::string>{"bias", "first.weight", "second.weight", "first.count",
                                                          "first.running", "second.count", "second.running"});
  CHECK(model.named_modules().size() == 3);
}

TEST_CASE("parameters require grad, buffers never can") {
  Scale layer(2);
  for (const Tensor& p : layer.parameters()) CHECK(p.requires_grad());
  for (const Tensor& b : layer.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK_THROWS_WITH(layer.running.requires_grad_(true), Catch::Contains("is a module buffer"));
}

TEST_CASE("registration names are validated") {
  Scale layer(2);
  CHECK_THROWS_WITH(layer.register_parameter("weight", zeros({1})),
                    "register_parameter: name 'weight' is already registered on this Scale");
  CHECK_THROWS_WITH(layer.register_buffer("a.b", zeros({1})), Catch::Contains("must not contain '.'"));
  CHECK_THROWS_WITH(layer.register_buffer("", zeros({1})), Catch::Contains("must not be empty"));
  CHECK_THROWS_WITH(layer.register_parameter("idx", zeros({1}, TensorOptions{}.with_dtype(DType::Int64))),
                    Catch::Contains("must be float32 or float64"));
}

TEST_CASE("train and eval are recursive") {
  Pair model;
  model.eval();
  CHECK_FALSE(model.first->is_training());
  model.train();
  CHECK(model.second->is_training());
}

TEST_CASE("to(float64) converts parameters and float buffers but keeps integer buffers") {
  Pair model;
  Tensor handle = model.first->weight;
  model.to(DType::Float64);
  CHECK(handle.dtype() == DType::Float64);  // the layer's own handle sees the conversion
  CHECK(model.first->running.dtype() == DType::Float64);
  CHECK(model.first->count.dtype() == DType::Int64);
  CHECK(model.first->weight.requires_grad());
}

TEST_CASE("load_state checks everything first and leaves the model unchanged on failure") {
  Pair model;
  auto state = model.state();
  for (auto& [name, t] : state)
    if (name == "first.running") t = full({3}, 7.0);
  CHECK_THROWS_WITH(model.load_state(state), "load_state: size mismatch for first.running: checkpoint [3], model [2]");
  CHECK(model.first->running.to_vector() == std::vector<double>{0.0, 0.0});

  nn::NamedTensors partial{{"bias", full({1}, 3.0)}, {"extra", zeros({1})}};
  CHECK_THROWS_WITH(model.load_state(partial), Catch::Contains("missing keys first.weight"));
  CHECK(model.bias.item() == 0.0);
  auto result = model.load_state(partial, /*strict=*/false);
  CHECK(result.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(result.missing_keys.size() == 6);
  CHECK(model.bias.item() == 3.0);
}

TEST_CASE("clone is a deep, independent copy") {
  Pair model;
  {
    NoGradGuard guard;
    model.first->weight.fill_(2.0);
  }
  model.eval();
  auto copy = std::dynamic_pointer_cast<Pair>(model.clone());
  REQUIRE(copy);
  CHECK(copy->first->weight.to_vector() == std::vector<double>{2.0, 2.0});
  CHECK_FALSE(copy->is_training());
  {
    NoGradGuard guard;
    copy->first->weight.fill_(5.0);
  }
  CHECK(model.first->weight.to_vector() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("printing shows the tree and the counts") {
  Pair model;
  CHECK(model.repr() ==
        "Pair(\n  (first): Scale(2)\n  (second): Scale(3)\n)\nparameters: 6 (6 trainable), buffers: 6 tensors (12 elements)");
}
