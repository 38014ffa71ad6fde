// binary_cross_entropy (on probabilities) and the loss modules BCELoss, BCEWithLogitsLoss, NLLLoss and
// CrossEntropyLoss: PyTorch's values and gradients (tests/data/bce_reference.txt), gradient properties,
// errors, and the modules' buffers.
#include <cmath>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

Reduction reduction_of(const Tensor& code) {
  const Reduction all[] = {Reduction::None, Reduction::Mean, Reduction::Sum};
  return all[static_cast<int>(code.item())];
}

rc::Gen<Reduction> reduction() { return rc::gen::element(Reduction::None, Reduction::Mean, Reduction::Sum); }

}  // namespace

TEST_CASE("BCELoss and BCEWithLogitsLoss match PyTorch's values and gradients") {
  const auto ref = tapegrad::testing::load_reference_file("bce_reference.txt");
  int cases = 0;
  for (const auto& [key, code] : ref) {
    if (!key.ends_with("/reduction")) continue;
    const std::string name = key.substr(0, key.size() - 10);
    INFO("case " << name);
    auto has = [&](const char* field) { return ref.count(name + "/" + field) > 0; };
    const Tensor x = ref.at(name + "/input").detach().requires_grad_();
    const Tensor t = ref.at(name + "/target").detach().requires_grad_(has("grad_target"));
    Tensor loss;
    if (name.starts_with("bce")) {
      nn::BCELoss module(BceOptions{reduction_of(code), has("weight") ? ref.at(name + "/weight") : Tensor()});
      loss = module(x, t);
    } else {
      BceWithLogitsOptions options{.reduction = reduction_of(code)};
      if (has("weight")) options.weight = ref.at(name + "/weight");
      if (has("pos_weight")) options.pos_weight = ref.at(name + "/pos_weight");
      nn::BCEWithLogitsLoss module(options);
      loss = module(x, t);
    }
    REQUIRE(loss.shape() == ref.at(name + "/loss").shape());
    CHECK(allclose(loss, ref.at(name + "/loss"), 1e-12, 1e-12));
    loss.backward(ref.at(name + "/grad_output"));
    CHECK(allclose(x.grad(), ref.at(name + "/grad_input"), 1e-12, 1e-12));
    if (has("grad_target")) CHECK(allclose(t.grad(), ref.at(name + "/grad_target"), 1e-12, 1e-12));
    ++cases;
  }
  CHECK(cases == 14);
}

TEST_CASE("binary_cross_entropy clamps its logs at -100 as PyTorch") {
  const Tensor x = tensor({0.0, 1.0, 0.0, 1.0}, {4}, f64()), t = tensor({0.0, 1.0, 1.0, 0.0}, {4}, f64());
  CHECK(binary_cross_entropy(x, t, {.reduction = Reduction::None}).to_vector() ==
        std::vector<double>{0.0, 0.0, 100.0, 100.0});
  CHECK(binary_cross_entropy(x, t).item() == 50.0);
  CHECK(binary_cross_entropy(x.to(DType::Float32), t.to(DType::Float32), {.reduction = Reduction::Sum}).item() == 200.0);
}

TEST_CASE("binary_cross_entropy gradients are right in input, target and weight") {
  rc::prop("reduction, weight", [] {
    const Shape shape = *gen::shape(1, 3);
    const Tensor x = *gen::tensor_of_shape(shape, 0.05, 0.95);
    const Tensor t = *gen::tensor_of_shape(shape, 0.0, 1.0);
    const Tensor w = *gen::tensor_of_shape({shape.back()}, 0.5, 2.0);
    const Reduction r = *reduction();
    const bool use_w = *rc::gen::arbitrary<bool>();
    auto f = [&](const std::vector<Tensor>& in) {
      BceOptions options{.reduction = r};
      if (use_w) options.weight = in[2];
      return binary_cross_entropy(in[0], in[1], options);
    };
    std::vector<Tensor> used{x.clone().requires_grad_(), t.clone().requires_grad_(), w.clone()};
    if (use_w) used[2].requires_grad_();
    TAPEGRAD_RC_GRADCHECK(f, used);
    TAPEGRAD_RC_GRADGRADCHECK(f, used);
  });
}

TEST_CASE("binary_cross_entropy of sigmoid equals binary_cross_entropy_with_logits away from saturation") {
  rc::prop("same loss and input gradient", [] {
    const Shape shape = *gen::shape(1, 3);
    const Tensor z = *gen::tensor_of_shape(shape, -6.0, 6.0);
    const Tensor t = *gen::tensor_of_shape(shape, 0.0, 1.0);
    const Reduction r = *reduction();
    const Tensor a = z.clone().requires_grad_(), b = z.clone().requires_grad_();
    const Tensor la = binary_cross_entropy(sigmoid(a), t, {.reduction = r});
    const Tensor lb = binary_cross_entropy_with_logits(b, t, {.reduction = r});
    TAPEGRAD_RC_ALLCLOSE(la, lb, 1e-10, 1e-12);
    sum(la).backward();
    sum(lb).backward();
    TAPEGRAD_RC_ALLCLOSE(a.grad(), b.grad(), 1e-8, 1e-12);
  });
}

TEST_CASE("binary_cross_entropy errors name the op and the shapes") {
  CHECK_THROWS_WITH(binary_cross_entropy(zeros({2, 3}), zeros({3})),
                    "binary_cross_entropy: target size [3] must be the same as input size [2, 3]");
  CHECK_THROWS_WITH(binary_cross_entropy(full({2}, 1.5), zeros({2})),
                    "binary_cross_entropy: all elements of input should be between 0 and 1, got 1.5 at index 0");
  CHECK_THROWS_WITH(binary_cross_entropy(zeros({2}), zeros({2}, f64())),
                    "binary_cross_entropy: input is float32 and target is float64; expected the same float dtype");
  CHECK_THROWS_WITH(binary_cross_entropy(zeros({2, 3}), zeros({2, 3}), {.weight = ones({2})}),
                    Catch::Contains("binary_cross_entropy"));
}

TEST_CASE("loss modules hold their weights as buffers, convert with to() and clone") {
  nn::BCEWithLogitsLoss loss(BceWithLogitsOptions{.weight = ones({3}), .pos_weight = full({3}, 2.0)});
  CHECK(loss.named_buffers().size() == 2);
  CHECK(loss.named_buffers()[1].first == "pos_weight");
  loss.to(DType::Float64);
  const Tensor x = zeros({2, 3}, f64()), t = ones({2, 3}, f64());
  // log(2) per element times pos_weight 2
  CHECK(loss(x, t).item() == Approx(2 * std::log(2.0)));
  const auto copy = std::dynamic_pointer_cast<nn::BCEWithLogitsLoss>(loss.clone());
  REQUIRE(copy);
  CHECK((*copy)(x, t).item() == Approx(2 * std::log(2.0)));
  nn::BCELoss plain;
  CHECK(plain.named_buffers().empty());
  CHECK(plain(full({4}, 0.5), ones({4})).item() == Approx(std::log(2.0)));
  nn::NLLLoss nll;
  nn::CrossEntropyLoss ce;
  const Tensor logits = tensor({1, 2, 3, 0, 0, 0}, {2, 3}, f64());
  const Tensor labels = from_vector(std::vector<std::int64_t>{2, 0}, {2});
  CHECK(nll(log_softmax(logits, 1), labels).item() == Approx(ce(logits, labels).item()));
}
