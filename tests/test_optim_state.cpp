// Typed optimizer state: SGD::state(p), Adam::state(p) (and AdamW's), RMSprop::state(p) give PyTorch's
// per-parameter fields as handles sharing the optimizer's tensors, undefined before the first step.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// Two parameters, a gradient for the first only.
struct Problem {
  Tensor a = tensor({1, -2, 3}, {3}, f64).requires_grad_(true);
  Tensor b = tensor({0.5, 0.25}, {2}, f64).requires_grad_(true);
  void backward() { sum(square(a)).backward(); }
};

}  // namespace

TEST_CASE("SGD::state(p): the momentum buffer, shared with the optimizer, undefined before the first step") {
  Problem problem;
  optim::SGD sgd({problem.a, problem.b}, {.lr = 0.1, .momentum = 0.9});
  CHECK_FALSE(sgd.state(problem.a).momentum_buffer.defined());
  problem.backward();
  sgd.step();
  const optim::SGDParamState s = sgd.state(problem.a);
  REQUIRE(s.momentum_buffer.defined());
  CHECK(identical(s.momentum_buffer, tensor({2, -4, 6}, {3}, f64)));  // the first buffer is the gradient
  CHECK_FALSE(sgd.state(problem.b).momentum_buffer.defined());         // b had no grad: no state yet
  // The same values the string-keyed state() copies out.
  for (const auto& [name, t] : sgd.state())
    if (name == "group0.param0.momentum_buffer") CHECK(identical(t, s.momentum_buffer));
  // A handle, not a copy: zeroing it resets the momentum the next step uses.
  Tensor buffer = s.momentum_buffer;
  buffer.zero_();
  problem.a.set_grad(Tensor());
  problem.backward();
  const Tensor before = problem.a.detach().clone();
  const Tensor grad = problem.a.grad().detach().clone();
  sgd.step();
  CHECK(identical(sgd.state(problem.a).momentum_buffer, grad));  // 0.9 * 0 + g
  CHECK(identical(problem.a, before - grad * 0.1));
  optim::SGD plain({problem.a}, {.lr = 0.1});
  plain.step();
  CHECK_FALSE(plain.state(problem.a).momentum_buffer.defined());  // no momentum, no buffer
}

TEST_CASE("Adam::state(p): step, exp_avg, exp_avg_sq and max_exp_avg_sq with amsgrad") {
  Problem problem;
  optim::Adam adam({problem.a, problem.b}, {.amsgrad = true});
  const optim::AdamParamState empty_state = adam.state(problem.a);
  CHECK_FALSE(empty_state.step.defined());
  CHECK_FALSE(empty_state.exp_avg.defined());
  CHECK_FALSE(empty_state.exp_avg_sq.defined());
  CHECK_FALSE(empty_state.max_exp_avg_sq.defined());
  for (int i = 0; i < 2; ++i) {
    problem.a.set_grad(Tensor());
    problem.backward();
    adam.step();
  }
  const optim::AdamParamState s = adam.state(problem.a);
  CHECK(s.step.dtype() == DType::Int64);
  CHECK(s.step.dim() == 0);
  CHECK(s.step.item() == 2);
  CHECK(s.exp_avg.shape() == Shape{3});
  CHECK(s.max_exp_avg_sq.defined());
  const auto named = adam.state();
  for (const auto& [name, t] : named) {
    if (name == "group0.param0.exp_avg") CHECK(identical(t, s.exp_avg));
    if (name == "group0.param0.exp_avg_sq") CHECK(identical(t, s.exp_avg_sq));
    if (name == "group0.param0.max_exp_avg_sq") CHECK(identical(t, s.max_exp_avg_sq));
  }
  adam.step();  // no new grad cleared: a's grad is still there, so a third step
  CHECK(s.step.item() == 3);  // the handle sees the optimizer's counter move
  CHECK_FALSE(optim::Adam({problem.a}).state(problem.a).max_exp_avg_sq.defined());
  optim::AdamW adamw({problem.a});
  adamw.step();
  CHECK(adamw.state(problem.a).step.item() == 1);
  CHECK_FALSE(adamw.state(problem.a).max_exp_avg_sq.defined());
}

TEST_CASE("RMSprop::state(p): square_avg always, momentum_buffer with momentum, grad_avg when centered") {
  Problem problem;
  problem.backward();
  optim::RMSprop plain({problem.a});
  CHECK_FALSE(plain.state(problem.a).square_avg.defined());
  plain.step();
  optim::RMSpropParamState s = plain.state(problem.a);
  CHECK(s.step.item() == 1);
  CHECK(s.square_avg.defined());
  CHECK_FALSE(s.momentum_buffer.defined());
  CHECK_FALSE(s.grad_avg.defined());
  optim::RMSprop full({problem.a}, {.momentum = 0.9, .centered = true});
  full.step();
  s = full.state(problem.a);
  CHECK(s.momentum_buffer.defined());
  CHECK(s.grad_avg.defined());
  CHECK(s.grad_avg.shape() == problem.a.shape());
}

TEST_CASE("state(p) finds a parameter by identity and refuses a tensor the optimizer does not hold") {
  nn::Linear model(2, 1);
  optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.5});
  sum(model(ones({3, 2}))).backward();
  sgd.step();
  CHECK(sgd.state(model.weight).momentum_buffer.shape() == Shape{1, 2});
  CHECK(sgd.state(model.named_parameters()[1].second).momentum_buffer.shape() == Shape{1});
  CHECK_THROWS_WITH(sgd.state(model.weight.detach()),
                    "SGD::state: the tensor [1, 2] float32 is not a parameter of this SGD optimizer");
  optim::AdamW adamw(model.parameters());
  CHECK_THROWS_WITH(adamw.state(zeros({2})), Catch::Contains("AdamW::state: the tensor [2] float32 is not a parameter"));
  CHECK_THROWS_WITH(sgd.state(Tensor()), Catch::StartsWith("SGD::state: expected a defined tensor"));
}
