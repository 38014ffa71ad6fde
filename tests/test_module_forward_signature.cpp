// The forward-signature trap (issue 39): a user forward that hides Module::forward instead of overriding it is
// refused where the module is taken by its type, and the base's run-time error says what went wrong.
#include <catch2/catch.hpp>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

// The trap as a port writes it: by value, no `override`.
struct ByValue : nn::Module {
  Tensor forward(Tensor x) { return x * 2.0; }
};
// Other ways to hide it: const-qualified, or an extra defaulted argument.
struct ConstForward : nn::Module {
  Tensor forward(const Tensor& x) const { return x; }
};
struct DefaultedArgument : nn::Module {
  Tensor forward(const Tensor& x, double scale = 1.0) { return x * scale; }
};
// Correct: overrides (with or without the keyword), or overloads beside the override, or takes several inputs.
struct Overrides : nn::Module {
  Tensor forward(const Tensor& x) override { return x * 2.0; }
};
struct OverridesWithoutKeyword : nn::Module {
  Tensor forward(const Tensor& x) { return x * 2.0; }  // NOLINT: the signature matches, so it overrides
};
struct Overloaded : nn::Module {
  Tensor forward(const Tensor& x) override { return x; }
  Tensor forward(const Tensor& x, const Tensor& y) { return x + y; }
};
struct TwoInputs : nn::Module {
  Tensor forward(const Tensor& x, const Tensor& y) { return x + y; }
};
struct Inherits : nn::Linear {
  Inherits() : nn::Linear(2, 2) {}
};

}  // namespace

TEST_CASE("a forward that hides Module::forward is detected at compile time", "[module]") {
  STATIC_REQUIRE(tapegrad::detail::HidesModuleForward<ByValue>);
  STATIC_REQUIRE(tapegrad::detail::HidesModuleForward<ConstForward>);
  STATIC_REQUIRE(tapegrad::detail::HidesModuleForward<DefaultedArgument>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<Overrides>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<OverridesWithoutKeyword>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<Overloaded>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<TwoInputs>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<Inherits>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::Module>);
  // The built-in layers, including those whose main forward takes several inputs.
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::Linear>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::Sequential>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::LSTM>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::MultiheadAttention>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::TransformerEncoder>);
  STATIC_REQUIRE_FALSE(tapegrad::detail::HidesModuleForward<nn::BatchNorm2d>);
}

TEST_CASE("a module without a forward of its own names the likely cause when called through the base", "[module]") {
  const auto module = std::make_shared<TwoInputs>();
  nn::Module& bare = *module;
  try {
    bare(ones({2}));
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("forward(const Tensor&) is not overridden"));
    CHECK_THAT(message, Catch::Contains("Tensor forward(const Tensor& input) override"));
  }
}

TEST_CASE("Sequential::push_back takes a module by value as libtorch does", "[module]") {
  nn::Sequential seq;
  std::shared_ptr<nn::Linear> first = seq.push_back(nn::Linear(3, 4));
  auto second = seq.push_back(Overrides());
  seq.push_back(std::make_shared<nn::ReLU>());
  REQUIRE(seq.size() == 3);
  CHECK(seq.at(0).get() == first.get());
  CHECK(seq.at(1).get() == second.get());
  CHECK(seq.named_parameters().front().first == "0.weight");
  const Tensor y = seq(ones({2, 3}));
  CHECK(y.shape() == Shape{2, 4});
}
