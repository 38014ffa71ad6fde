// What optimizers and gradient clipping accept and refuse: hyperparameters (PyTorch's messages), parameter lists
// and groups, and clipping by norm and by value against PyTorch's numbers.
#include <cmath>
#include <limits>

#include "support/optim_problem.h"
#include "support/optim_reference.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::optim;
using tapegrad::testing::close_to;
using tapegrad::testing::initial_params;
using tapegrad::testing::param_shapes;
using tapegrad::testing::reference_values;
using tapegrad::testing::set_reference_grads;

namespace {

TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

}  // namespace

// ---- hyperparameter errors (PyTorch's messages) ----
TEST_CASE("bad hyperparameters give PyTorch's messages") {
  std::vector<Tensor> p = initial_params();
  CHECK_THROWS_WITH(SGD(p, SGDOptions{.lr = -0.1}), "SGD: Invalid learning rate: -0.1");
  CHECK_THROWS_WITH(SGD(p, SGDOptions{}), "SGD: required hyperparameter lr not specified (set SGDOptions::lr)");
  CHECK_THROWS_WITH(SGD(p, SGDOptions{.lr = 0.1, .momentum = -0.5}), "SGD: Invalid momentum value: -0.5");
  CHECK_THROWS_WITH(SGD(p, SGDOptions{.lr = 0.1, .weight_decay = -1}), "SGD: Invalid weight_decay value: -1.0");
  CHECK_THROWS_WITH(SGD(p, SGDOptions{.lr = 0.1, .nesterov = true}),
                    "SGD: Nesterov momentum requires a momentum and zero dampening");
  CHECK_THROWS_WITH(SGD(p, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    "SGD: Nesterov momentum requires a momentum and zero dampening");
  CHECK_THROWS_WITH(Adam(p, AdamOptions{.lr = -1e-3}), "Adam: Invalid learning rate: -0.001");
  CHECK_THROWS_WITH(Adam(p, AdamOptions{.betas = {1.0, 0.999}}), "Adam: Invalid beta parameter at index 0: 1.0");
  CHECK_THROWS_WITH(Adam(p, AdamOptions{.betas = {0.9, -0.1}}), "Adam: Invalid beta parameter at index 1: -0.1");
  CHECK_THROWS_WITH(Adam(p, AdamOptions{.eps = -1e-8}), "Adam: Invalid epsilon value: -1e-08");
  CHECK_THROWS_WITH(AdamW(p, AdamWOptions{.weight_decay = -0.01}), "AdamW: Invalid weight_decay value: -0.01");
  CHECK_THROWS_WITH(RMSprop(p, RMSpropOptions{.alpha = -0.9}), "RMSprop: Invalid alpha value: -0.9");
  CHECK_THROWS_WITH(RMSprop(p, RMSpropOptions{.momentum = -1}), "RMSprop: Invalid momentum value: -1.0");
  CHECK_THROWS_WITH(RMSprop(p, RMSpropOptions{.lr = std::nan("")}), "RMSprop: Invalid learning rate: nan");
}

TEST_CASE("bad parameter lists and groups are refused") {
  std::vector<Tensor> p = initial_params();
  CHECK_THROWS_WITH(SGD(std::vector<Tensor>{}, SGDOptions{.lr = 0.1}),
                    "SGD: parameter group 0 is empty (optimizer got an empty parameter list)");
  CHECK_THROWS_WITH(SGD({p[0], p[1], p[0]}, SGDOptions{.lr = 0.1}),
                    "SGD: some parameters appear more than once (parameter 2 of group 0)");
  CHECK_THROWS_WITH(SGD(std::vector<ParamGroup>{{{p[0]}, {}}, {{p[0]}, {}}}, SGDOptions{.lr = 0.1}),
                    "SGD: some parameters appear more than once (parameter 0 of group 1)");
  CHECK_THROWS_WITH(Adam(std::vector<ParamGroup>{{{p[0]}, {{"momentum", 0.9}}}}),
                    "Adam: unknown hyperparameter 'momentum' in parameter group 0 (known: amsgrad, beta1, beta2, eps, "
                    "lr, maximize, weight_decay)");
  CHECK_THROWS_WITH(Adam(std::vector<ParamGroup>{{{p[0]}, {}}, {{p[1]}, {{"beta1", 1.5}}}}),
                    "Adam: Invalid beta parameter at index 0: 1.5 (parameter group 1)");
  CHECK_THROWS_WITH(SGD({arange(3)}, SGDOptions{.lr = 0.1}),
                    "SGD: parameter 0 of group 0 is int64; only float32 and float64 tensors can be optimized");
  CHECK_THROWS_WITH(SGD({p[0] * 2.0}, SGDOptions{.lr = 0.1}),
                    "SGD: parameter 0 of group 0 is not a leaf (can't optimize a non-leaf Tensor)");
}

TEST_CASE("groups keep their own hyperparameters and add_param_group validates overrides") {
  std::vector<Tensor> p = initial_params();
  SGD sgd({p[0]}, SGDOptions{.lr = 0.1, .momentum = 0.9});
  sgd.add_param_group({{p[1]}, {{"lr", 0.01}, {"momentum", 0.0}}});
  REQUIRE(sgd.param_groups().size() == 2);
  CHECK(sgd.param_groups()[0].lr() == 0.1);
  CHECK(sgd.param_groups()[1].lr() == 0.01);
  CHECK(sgd.param_groups()[1].get("momentum") == 0.0);
  CHECK(sgd.param_groups()[1].get("dampening") == 0.0);
  CHECK_THROWS_WITH(sgd.param_groups()[1].get("betas"),
                    "ParamGroup: no hyperparameter 'betas' (the group has dampening, lr, maximize, momentum, nesterov, "
                    "weight_decay)");
  set_reference_grads(p);
  const auto before = p[1].to_vector();
  sgd.step();
  // Plain SGD for the second group: p - 0.01 g.
  const Tensor g = p[1].grad();
  std::vector<double> expected;
  for (std::size_t i = 0; i < before.size(); ++i) expected.push_back(before[i] - 0.01 * g.to_vector()[i]);
  CHECK(close_to(p[1].to_vector(), expected, 1e-15));
  CHECK(sgd.state().size() == 6 + 1 + 6 + 1 + 1);  // two groups' options and counts, one momentum buffer
}

// ---- gradient clipping ----
TEST_CASE("clip_grad_norm_ matches PyTorch for every norm type") {
  const std::vector<std::pair<std::string, std::pair<double, double>>> cases = {
      {"l2", {1.0, 2.0}}, {"l2_no_clip", {100.0, 2.0}}, {"inf", {0.5, inf_norm}}, {"l1", {2.0, 1.0}}, {"l3", {1.5, 3.0}}};
  const std::vector<std::vector<double>> grads = {{0.5, -1.5, 2.0, 0.25, -0.75, 1.0}, {3.0, -0.2, 0.0, -1.1}};
  for (const auto& [name, options] : cases) {
    DYNAMIC_SECTION(name) {
      std::vector<Tensor> params = initial_params();
      for (std::size_t i = 0; i < params.size(); ++i)
        params[i].set_grad(from_vector(grads[i], param_shapes[i], TensorOptions{}.with_dtype(DType::Float64)));
      const double total = clip_grad_norm_(params, options.first, options.second);
      CHECK(close_to({total}, reference_values("clip/" + name + "/total")));
      for (std::size_t i = 0; i < params.size(); ++i)
        CHECK(close_to(params[i].grad().to_vector(), reference_values(fmt::format("clip/{}/grad{}", name, i))));
    }
  }
}

TEST_CASE("clip_grad_value_ matches PyTorch") {
  std::vector<Tensor> params = initial_params();
  const std::vector<std::vector<double>> grads = {{0.5, -1.5, 2.0, 0.25, -0.75, 1.0}, {3.0, -0.2, 0.0, -1.1}};
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].set_grad(from_vector(grads[i], param_shapes[i], TensorOptions{}.with_dtype(DType::Float64)));
  clip_grad_value_(params, 0.6);
  for (std::size_t i = 0; i < params.size(); ++i)
    CHECK(params[i].grad().to_vector() == reference_values(fmt::format("clip/value/grad{}", i)));
}

TEST_CASE("clip_grad_norm_ with a non-finite norm: PyTorch's error, or scaling by it") {
  Tensor p = zeros({3}, f64_grad()), q = zeros({2}, f64_grad()), frozen = zeros({2}, f64_grad());
  p.set_grad(tensor({1.0, INFINITY, 2.0}, {3}, TensorOptions{}.with_dtype(DType::Float64)));
  q.set_grad(tensor({3.0, 4.0}, {2}, TensorOptions{}.with_dtype(DType::Float64)));
  CHECK_THROWS_WITH(clip_grad_norm_({p, q, frozen}, 1.0, 2.0, /*error_if_nonfinite=*/true),
                    "clip_grad_norm_: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it "
                    "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
                    "`error_if_nonfinite=False`");
  CHECK(q.grad().to_vector() == std::vector<double>{3.0, 4.0});
  CHECK(std::isinf(clip_grad_norm_({p, q, frozen}, 1.0)));
  // max_norm / (inf + 1e-6) = 0: finite grads become 0, the infinite one NaN (inf * 0), as in PyTorch.
  CHECK(q.grad().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK(std::isnan(p.grad().to_vector()[1]));
  CHECK_FALSE(frozen.grad().defined());
  CHECK(clip_grad_norm_({frozen}, 1.0) == 0.0);
  CHECK_THROWS_WITH(clip_grad_norm_({q}, 1.0, 0.0), "clip_grad_norm_: norm_type must be positive or infinity, got 0.0");
}
