// InferenceMode: nothing records, tensors made in it are inference tensors, which keep no version and refuse
// to enter autograd later with an error naming the op.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
}  // namespace

TEST_CASE("InferenceMode switches off recording and restores both modes on exit") {
  Tensor w = ones({2}, f64().with_requires_grad());
  CHECK_FALSE(is_inference_mode_enabled());
  {
    InferenceMode guard;
    CHECK(is_inference_mode_enabled());
    CHECK_FALSE(is_grad_enabled());
    Tensor y = w * 3.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_inference());
    {
      InferenceMode off(false);
      CHECK_FALSE(is_inference_mode_enabled());
      CHECK_FALSE(is_grad_enabled());  // grad mode stays as the outer scope left it
      CHECK_FALSE(zeros({1}).is_inference());
    }
    CHECK(is_inference_mode_enabled());
  }
  CHECK_FALSE(is_inference_mode_enabled());
  CHECK(is_grad_enabled());
  {
    NoGradGuard no_grad;
    { InferenceMode guard; }
    CHECK_FALSE(is_grad_enabled());  // the outer NoGradGuard's mode comes back, not "on"
  }
}

TEST_CASE("tensors made under InferenceMode are inference tensors; others are not") {
  Tensor before = ones({2, 3});
  Tensor made, derived, viewed;
  {
    InferenceMode guard;
    made = zeros({2, 3});
    derived = before + 1.0;
    viewed = made.reshape({6});
    CHECK_FALSE(before.is_inference());
  }
  CHECK(made.is_inference());
  CHECK(derived.is_inference());
  CHECK(viewed.is_inference());
  CHECK_FALSE(Tensor().is_inference());
  CHECK_FALSE(made.clone().is_inference());  // a copy made outside is a normal tensor
  CHECK(made.clone().version() == 0);
}

TEST_CASE("in-place ops on inference tensors do not bump the version; on normal tensors they still do") {
  Tensor normal = zeros({3});
  Tensor inference;
  {
    InferenceMode guard;
    inference = zeros({3});
    inference.add_(1.0).mul_(2.0).fill_(4.0);
    CHECK(inference.version() == 0);
    normal.add_(1.0);
    CHECK(normal.version() == 1);
  }
  inference.zero_().copy_(ones({3}));
  CHECK(inference.version() == 0);
  CHECK(inference.to_vector() == std::vector<double>{1, 1, 1});
}

TEST_CASE("an inference tensor used later in a recorded op throws an error naming the op") {
  Tensor inference;
  {
    InferenceMode guard;
    inference = ones({2}, f64());
  }
  Tensor w = ones({2}, f64().with_requires_grad());
  CHECK_THROWS_WITH(w * inference, Catch::Contains("mul") && Catch::Contains("inference tensor") &&
                                       Catch::Contains("shape [2]"));
  CHECK_THROWS_WITH(matmul(w.reshape({1, 2}), inference.reshape({2, 1})), Catch::Contains("inference tensor"));
  CHECK_THROWS_WITH(inference.requires_grad_(), Catch::Contains("requires_grad_") &&
                                                    Catch::Contains("inference tensor"));
  // Nothing records, so these are fine: no input requires grad, or grad mode is off.
  CHECK((inference * 2.0).to_vector() == std::vector<double>{2, 2});
  {
    NoGradGuard no_grad;
    CHECK((w * inference).to_vector() == std::vector<double>{1, 1});
  }
  // A normal copy enters autograd.
  Tensor copy = inference.clone();
  Tensor y = sum(w * copy);
  y.backward();
  CHECK(w.grad().to_vector() == std::vector<double>{1, 1});
}

TEST_CASE("a module evaluated under InferenceMode records nothing and gives inference outputs") {
  Generator g(3);
  nn::Linear layer(nn::LinearOptions{3, 2}.with_generator(g));
  Tensor x = randn({4, 3}, g);
  const std::size_t tape_before = tape_size();
  Tensor y;
  {
    InferenceMode guard;
    y = layer.forward(x);
  }
  CHECK(tape_size() == tape_before);
  CHECK(y.is_inference());
  CHECK_FALSE(y.requires_grad());
  CHECK_THROWS_WITH(layer.forward(x) + y, Catch::Contains("add") && Catch::Contains("inference tensor"));
}
