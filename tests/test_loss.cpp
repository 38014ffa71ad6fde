// Losses: hand-computed values, PyTorch's reduction and ignore_index rules, stability, gradient properties.
#include <cmath>
#include <limits>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {
TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }
Tensor labels_of(std::vector<std::int64_t> values) {
  const auto n = static_cast<std::int64_t>(values.size());
  return from_vector(values, {n});
}

// The two rows used by the known-value tests: log-sum-exp by hand.
const double lse_123 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));  // 3.4076059644...
const double nll_row0 = lse_123 - 3.0;                                           // label 2 of [1, 2, 3]
const double nll_row1 = std::log(2.0);                                           // label 0 of [0, 0]

// N rows of C logits and labels in [0, C), some replaced by ignore_index but row 0 always counted.
struct Classification {
  Tensor logits, labels;
};
rc::Gen<Classification> classification(bool allow_ignored) {
  return rc::gen::mapcat(
      rc::gen::pair(rc::gen::inRange<std::int64_t>(1, 5), rc::gen::inRange<std::int64_t>(1, 5)),
      [allow_ignored](std::pair<std::int64_t, std::int64_t> nc) {
        const auto [n, c] = nc;
        return rc::gen::map(
            rc::gen::pair(gen::tensor_of_shape({n, c}, -3.0, 3.0),
                          rc::gen::container<std::vector<std::int64_t>>(
                              static_cast<std::size_t>(n), rc::gen::inRange<std::int64_t>(allow_ignored ? -1 : 0, c))),
            [n](std::pair<Tensor, std::vector<std::int64_t>> p) {
              if (p.second[0] < 0) p.second[0] = 0;
              for (auto& y : p.second)
                if (y < 0) y = -100;
              return Classification{p.first, from_vector(p.second, {n})};
            });
      });
}
rc::Gen<Reduction> reduction() { return rc::gen::element(Reduction::None, Reduction::Mean, Reduction::Sum); }
}  // namespace

TEST_CASE("cross_entropy matches hand-computed values") {
  const Tensor logits = tensor({1, 2, 3, 0, 0, 7}, {2, 3}, f64());
  // row 1 is [0, 0, 7] with label 0: 7 + log(1 + 2 e^-7) - 0
  const double nll_row1_3 = std::log(2.0 + std::exp(7.0));
  const Tensor labels = labels_of({2, 0});
  CHECK(cross_entropy(logits, labels).item() == Approx((nll_row0 + nll_row1_3) / 2).epsilon(1e-14));
  CHECK(cross_entropy(logits, labels, {.reduction = Reduction::Sum}).item() ==
        Approx(nll_row0 + nll_row1_3).epsilon(1e-14));
  CHECK(allclose(cross_entropy(logits, labels, {.reduction = Reduction::None}),
                 tensor({nll_row0, nll_row1_3}, {2}, f64()), 1e-14));
  CHECK(cross_entropy(tensor({0, 0}, {1, 2}, f64()), labels_of({1})).item() == Approx(nll_row1).epsilon(1e-15));
}

TEST_CASE("label smoothing uses the target (1 - eps) onehot + eps / C") {
  const Tensor logits = tensor({1, 2, 3}, {1, 3}, f64());
  // -sum_c t_c log p_c with t = (0.1/3, 0.1/3, 0.9 + 0.1/3) and log p_c = x_c - lse
  const double expected = -(0.1 / 3 * (1 - lse_123) + 0.1 / 3 * (2 - lse_123) + (0.9 + 0.1 / 3) * (3 - lse_123));
  CHECK(cross_entropy(logits, labels_of({2}), {.label_smoothing = 0.1}).item() == Approx(expected).epsilon(1e-14));
  CHECK(cross_entropy(logits, labels_of({2}), {.label_smoothing = 1.0}).item() ==
        Approx(lse_123 - 2.0).epsilon(1e-14));  // uniform target: lse - mean(x)
}

TEST_CASE("ignore_index rows count for nothing, and mean divides by the rest") {
  const Tensor logits = tensor({1, 2, 3, 0, 0, 7, 0, 0, 0}, {3, 3}, f64());
  const Tensor labels = labels_of({2, -100, 1});
  const double row2 = std::log(3.0);
  CHECK(cross_entropy(logits, labels).item() == Approx((nll_row0 + row2) / 2).epsilon(1e-14));
  CHECK(allclose(cross_entropy(logits, labels, {.reduction = Reduction::None}), tensor({nll_row0, 0, row2}, {3}, f64()),
                 1e-14));
  // with smoothing, the smoothing term of an ignored row is dropped too
  const double smooth0 = 0.8 * nll_row0 + 0.2 * (lse_123 - 2.0), smooth2 = row2;
  CHECK(cross_entropy(logits, labels, {.label_smoothing = 0.2}).item() ==
        Approx((smooth0 + smooth2) / 2).epsilon(1e-14));
  CHECK(cross_entropy(logits, labels_of({2, 5, 1}), {.ignore_index = 5}).item() ==
        Approx((nll_row0 + row2) / 2).epsilon(1e-14));
  // PyTorch: mean over zero counted rows is 0/0
  CHECK(std::isnan(cross_entropy(logits, labels_of({-100, -100, -100})).item()));
}

TEST_CASE("cross_entropy is finite for huge logits") {
  const Tensor big32 = from_vector(std::vector<float>{1e30f, 0.0f, -1e30f}, {1, 3});
  CHECK(cross_entropy(big32, labels_of({0})).item() == 0.0);
  CHECK(cross_entropy(big32, labels_of({1})).item() == Approx(1e30));
  const Tensor big64 = tensor({1e300, -1e300, 5.0, 5.0}, {2, 2}, f64_grad());
  Tensor loss = cross_entropy(big64, labels_of({1, 0}));
  CHECK(std::isfinite(loss.item()));
  loss.backward();
  for (double g : big64.grad().to_vector()) CHECK(std::isfinite(g));
  CHECK(allclose(big64.grad(), tensor({0.5, -0.5, -0.25, 0.25}, {2, 2}, f64())));
}

TEST_CASE("cross_entropy gradient is (softmax - onehot) / N") {
  Tensor logits = tensor({1, 2, 3, 0, 0, 0}, {2, 3}, f64_grad());
  cross_entropy(logits, labels_of({2, 0})).backward();
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(allclose(logits.grad(),
                 tensor({std::exp(1.0) / z / 2, std::exp(2.0) / z / 2, (std::exp(3.0) / z - 1) / 2, (1.0 / 3 - 1) / 2,
                         1.0 / 6, 1.0 / 6},
                        {2, 3}, f64()),
                 1e-12));
}

TEST_CASE("cross_entropy and nll_loss report bad inputs") {
  const Tensor logits = zeros({2, 3});
  CHECK_THROWS_WITH(cross_entropy(zeros({3}), labels_of({0})),
                    "cross_entropy: expected input [N, C] and labels [N], got [3] and [1]");
  CHECK_THROWS_WITH(cross_entropy(logits, labels_of({0, 1, 2})),
                    "cross_entropy: expected labels [2] for input [2, 3], got [3]");
  CHECK_THROWS_WITH(cross_entropy(logits, labels_of({0, 3})),
                    "cross_entropy: label 3 at row 1 is out of range for 3 classes");
  CHECK_THROWS_WITH(cross_entropy(logits, zeros({2})),
                    "cross_entropy: labels must be int64 class indices, got float32");
  CHECK_THROWS_WITH(cross_entropy(logits, labels_of({0, 1}), {.label_smoothing = 1.5}),
                    "cross_entropy: label_smoothing must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH(nll_loss(logits, labels_of({-1, 0})), "nll_loss: label -1 at row 0 is out of range for 3 classes");
  CHECK_THROWS_WITH(mse_loss(zeros({2, 3}), zeros({4})), Catch::Contains("mse_loss") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(binary_cross_entropy_with_logits(zeros({2, 3}), zeros({3})),
                    "binary_cross_entropy_with_logits: target size [3] must be the same as input size [2, 3]");
}

TEST_CASE("nll_loss of log_softmax equals cross_entropy") {
  rc::prop("same values and gradients", [] {
    const auto data = *classification(true);
    const Reduction r = *reduction();
    Tensor a = data.logits.clone().requires_grad_(), b = data.logits.clone().requires_grad_();
    Tensor ce = cross_entropy(a, data.labels, {.reduction = r});
    Tensor nll = nll_loss(log_softmax(b, 1), data.labels, {.reduction = r});
    RC_ASSERT(allclose(ce, nll, 1e-12, 1e-12));
    sum(ce).backward();
    sum(nll).backward();
    RC_ASSERT(allclose(a.grad(), b.grad(), 1e-10, 1e-12));
  });
}

TEST_CASE("mse_loss and l1_loss known values") {
  const Tensor x = tensor({1, 2, 3, 4}, {2, 2}, f64()), t = tensor({0, 2, 5, 4}, {2, 2}, f64());
  CHECK(mse_loss(x, t).item() == Approx((1.0 + 4.0) / 4));
  CHECK(mse_loss(x, t, Reduction::Sum).item() == Approx(5.0));
  CHECK(l1_loss(x, t).item() == Approx(3.0 / 4));
  CHECK(allclose(l1_loss(x, t, Reduction::None), tensor({1, 0, 2, 0}, {2, 2}, f64())));
}

TEST_CASE("binary_cross_entropy_with_logits matches the naive formula and stays finite") {
  const Tensor x = tensor({-2, 0.5, 3}, {3}, f64()), t = tensor({0, 1, 0.25}, {3}, f64());
  double expected = 0;
  for (int i = 0; i < 3; ++i) {
    const double s = 1 / (1 + std::exp(-x.at({i})));
    expected -= t.at({i}) * std::log(s) + (1 - t.at({i})) * std::log(1 - s);
  }
  CHECK(binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::Sum}).item() ==
        Approx(expected).epsilon(1e-14));
  // pos_weight multiplies the positive term: -[pw t log s + (1 - t) log(1 - s)]
  const Tensor pw = tensor({3.0}, {1}, f64());
  double weighted = 0;
  for (int i = 0; i < 3; ++i) {
    const double s = 1 / (1 + std::exp(-x.at({i})));
    weighted -= 3.0 * t.at({i}) * std::log(s) + (1 - t.at({i})) * std::log(1 - s);
  }
  CHECK(binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::Sum, .pos_weight = pw}).item() ==
        Approx(weighted).epsilon(1e-14));
  const Tensor huge = tensor({1e4, -1e4}, {2}, f64_grad());
  Tensor loss = binary_cross_entropy_with_logits(huge, tensor({0, 1}, {2}, f64()), {.reduction = Reduction::Sum});
  CHECK(loss.item() == Approx(2e4));
  loss.backward();
  CHECK(huge.grad().to_vector() == std::vector<double>{1.0, -1.0});
}

// ---- gradient properties (float64, random shapes, options and values) ----

TEST_CASE("cross_entropy gradients are right for every option") {
  rc::prop("reduction, label smoothing, ignore_index", [] {
    const auto data = *classification(true);
    const CrossEntropyOptions options{.reduction = *reduction(), .label_smoothing = *rc::gen::element(0.0, 0.1, 0.5)};
    auto f = [&](const std::vector<Tensor>& x) { return cross_entropy(x[0], data.labels, options); };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{data.logits}));
    TAPEGRAD_RC_GRADGRADCHECK(f, (std::vector<Tensor>{data.logits}));
  });
}

TEST_CASE("nll_loss gradients are right") {
  rc::prop("reduction, ignore_index", [] {
    const auto data = *classification(true);
    const CrossEntropyOptions options{.reduction = *reduction()};
    auto f = [&](const std::vector<Tensor>& x) { return nll_loss(x[0], data.labels, options); };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{data.logits}));
    // nll is linear, so the second check exercises the recorded (create_graph) backward through a product
    auto g = [&](const std::vector<Tensor>& x) { return nll_loss(mul(x[0], x[0]), data.labels, options); };
    TAPEGRAD_RC_GRADGRADCHECK(g, (std::vector<Tensor>{data.logits}));
  });
}

TEST_CASE("mse_loss and l1_loss gradients are right for broadcast shapes") {
  rc::prop("reduction", [] {
    const auto shapes = *gen::broadcast_pair();
    const Tensor a = *gen::tensor_of_shape(shapes.first);
    // Note: targets sit off the grid of a's values by 1e-3, so |a - b| never hits l1's kink at 0.
    const Tensor b = add(*gen::tensor_of_shape(shapes.second), 1e-3);
    const Reduction r = *reduction();
    TAPEGRAD_RC_GRADCHECK([r](const std::vector<Tensor>& x) { return mse_loss(x[0], x[1], r); },
                          (std::vector<Tensor>{a, b}));
    TAPEGRAD_RC_GRADCHECK([r](const std::vector<Tensor>& x) { return l1_loss(x[0], x[1], r); },
                          (std::vector<Tensor>{a, b}));
  });
}

TEST_CASE("binary_cross_entropy_with_logits gradients are right in input, target, pos_weight and weight") {
  rc::prop("reduction, pos_weight, weight", [] {
    const Shape shape = *gen::shape(1, 3);
    const Tensor x = *gen::tensor_of_shape(shape, -4.0, 4.0);
    const Tensor t = *gen::tensor_of_shape(shape, 0.0, 1.0);
    const Tensor pw = *gen::tensor_of_shape({shape.back()}, 0.5, 3.0);
    const Tensor w = *gen::tensor_of_shape(shape, 0.5, 2.0);
    const Reduction r = *reduction();
    const bool use_pw = *rc::gen::arbitrary<bool>(), use_w = *rc::gen::arbitrary<bool>();
    auto f = [&](const std::vector<Tensor>& in) {
      BceWithLogitsOptions options{.reduction = r};
      if (use_pw) options.pos_weight = in[2];
      if (use_w) options.weight = in[3];
      return binary_cross_entropy_with_logits(in[0], in[1], options);
    };
    std::vector<Tensor> used{x.clone().requires_grad_(), t.clone().requires_grad_(), pw.clone(), w.clone()};
    if (use_pw) used[2].requires_grad_();
    if (use_w) used[3].requires_grad_();
    TAPEGRAD_RC_GRADCHECK(f, used);
    TAPEGRAD_RC_GRADGRADCHECK(f, used);
  });
}

TEST_CASE("fused and recorded backward paths agree") {
  rc::prop("cross_entropy first derivatives with and without create_graph", [] {
    const auto data = *classification(true);
    const CrossEntropyOptions options{.reduction = *reduction(), .label_smoothing = *rc::gen::element(0.0, 0.2)};
    Tensor x = data.logits.clone().requires_grad_();
    Tensor loss = sum(cross_entropy(x, data.labels, options));
    const auto fast = autograd::grad({loss}, {x}, {}, /*retain_graph=*/true);
    const auto recorded = autograd::grad({loss}, {x}, {}, false, /*create_graph=*/true);
    RC_ASSERT(allclose(fast[0], recorded[0].detach(), 1e-12, 1e-14));
  });
}
