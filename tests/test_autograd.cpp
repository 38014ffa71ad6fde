// The tape: closed-form gradients, accumulation, graph shapes that break naive autograd, memory, threads.
#include <thread>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {
TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }
}  // namespace

TEST_CASE("d(x*x)/dx is 2x") {
  Tensor x = tensor({1.0, -2.0, 3.0}, {3}, f64_grad());
  sum(x * x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{2.0, -4.0, 6.0});
}

TEST_CASE("a diamond graph adds both paths") {
  Tensor x = tensor({2.0}, {1}, f64_grad());
  Tensor a = x * 3.0, b = exp(x);
  sum(a * b).backward();  // d/dx 3x e^x = 3e^x + 3x e^x
  CHECK(x.grad().item() == Approx(3 * std::exp(2.0) * 3.0));
}

TEST_CASE("gradients accumulate across backward calls until zeroed") {
  Tensor x = tensor({1.0, 2.0}, {2}, f64_grad());
  sum(x * 2.0).backward();
  sum(x * 2.0).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{4.0, 4.0});
  x.set_grad(Tensor());
  sum(x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("a second backward without retain_graph is an error; with it, gradients double") {
  Tensor x = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_vector() == std::vector<double>{4.0, 8.0});
  Tensor z = sum(exp(x));
  z.backward();
  CHECK_THROWS_WITH(z.backward(), Catch::Contains("backward through the graph a second time"));
}

TEST_CASE("backward needs a gradient for a non-scalar and a tensor that requires grad") {
  Tensor x = tensor({1.0, 2.0}, {2}, f64_grad());
  CHECK_THROWS_WITH((x * 2.0).backward(), Catch::Contains("shape [2]"));
  CHECK_THROWS_WITH(ones({2}).backward(Tensor()), Catch::Contains("does not require grad"));
  (x * 2.0).backward(ones({2}, TensorOptions{}.with_dtype(DType::Float64)));
  CHECK(x.grad().to_vector() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("NoGradGuard records nothing") {
  Tensor x = tensor({1.0}, {1}, f64_grad());
  const auto before = tape_size();
  {
    NoGradGuard guard;
    CHECK_FALSE(is_grad_enabled());
    Tensor y = x * x;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(is_grad_enabled());
  CHECK(tape_size() == before);
}

TEST_CASE("an in-place change to a saved tensor makes backward throw instead of lying") {
  Tensor x = tensor({1.0, 2.0}, {2}, f64_grad());
  Tensor w = tensor({3.0, 4.0}, {2}, TensorOptions{}.with_dtype(DType::Float64));
  Tensor y = sum(x * w);
  w.mul_(2.0);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified in place"));
}

TEST_CASE("in-place ops on a tensor that requires grad are refused while grad mode is on") {
  Tensor x = tensor({1.0}, {1}, f64_grad());
  CHECK_THROWS_WITH(x.add_(1.0), Catch::Contains("add_: tensor of shape [1] requires grad"));
  NoGradGuard guard;
  x.add_(1.0);
  CHECK(x.item() == 2.0);
}

TEST_CASE("a 100000-op chain backpropagates and frees without recursion") {
  Tensor x = tensor({1.0}, {1}, f64_grad());
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  sum(y).backward();
  CHECK(x.grad().item() == 1.0);
  y = Tensor();
  prune_tape();
  CHECK(tape_size() == 0);
}

TEST_CASE("forward passes without backward do not grow the tape without bound") {
  Tensor w = tensor({0.5, 0.25}, {2}, f64_grad());
  for (int i = 0; i < 50000; ++i) {
    Tensor loss = sum(exp(w * 2.0));
    (void)loss;
  }
  CHECK(tape_size() < 10000);
}

TEST_CASE("two independent graphs on one thread are each backpropagated") {
  Tensor a = tensor({1.0}, {1}, f64_grad());
  Tensor b = tensor({2.0}, {1}, f64_grad());
  Tensor ya = sum(a * a);
  Tensor yb = sum(b * b * b);
  yb.backward();
  CHECK_FALSE(a.grad().defined());
  ya.backward();
  CHECK(a.grad().item() == 2.0);
  CHECK(b.grad().item() == 12.0);
}

TEST_CASE("separate threads train separate models concurrently") {
  auto worker = [](double start, double* result) {
    Tensor w = tensor({start}, {1}, f64_grad());
    for (int step = 0; step < 200; ++step) {
      Tensor loss = sum((w - 3.0) * (w - 3.0));
      loss.backward();
      NoGradGuard guard;
      w.add_(w.grad(), -0.1);
      w.set_grad(Tensor());
    }
    *result = w.item();
  };
  double r1 = 0, r2 = 0;
  std::thread t1(worker, 0.0, &r1), t2(worker, 10.0, &r2);
  t1.join();
  t2.join();
  CHECK(r1 == Approx(3.0));
  CHECK(r2 == Approx(3.0));
}

TEST_CASE("create_graph gives second derivatives") {
  Tensor x = tensor({1.5}, {1}, f64_grad());
  Tensor y = sum(x * x * x);
  Tensor g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true)[0];  // 3x^2
  CHECK(g.item() == Approx(3 * 1.5 * 1.5));
  Tensor h = autograd::grad({sum(g)}, {x})[0];  // 6x
  CHECK(h.item() == Approx(9.0));
}

TEST_CASE("a leaf's grad is its own storage even when two inputs got the same gradient tensor") {
  Tensor a = tensor({1.0}, {1}, f64_grad());
  Tensor b = tensor({2.0}, {1}, f64_grad());
  sum(a + b).backward();
  NoGradGuard guard;
  a.grad().mul_(10.0);
  CHECK(b.grad().item() == 1.0);
}

TEST_CASE("printing shows values, shape, dtype and grad_fn") {
  Tensor x = tensor({1.0, 2.0}, {2}, f64_grad());
  CHECK(fmt::format("{}", x) == "tensor([1.0000, 2.0000], shape=[2], dtype=float64, requires_grad=true)");
  CHECK(fmt::format("{}", x * x) == "tensor([1.0000, 4.0000], shape=[2], dtype=float64, grad_fn=<mul>)");
}

TEST_CASE("binary ops name the op and both shapes when shapes do not broadcast") {
  CHECK_THROWS_WITH(add(zeros({2, 3}), zeros({4})), "add: shapes [2, 3] and [4] cannot be broadcast (dim 1: 3 vs 4)");
  CHECK_THROWS_WITH(mul(zeros({2}), zeros({2}, TensorOptions{}.with_dtype(DType::Float64))),
                    Catch::Contains("mul: dtype mismatch"));
  CHECK_THROWS_WITH(exp(zeros({2}, TensorOptions{}.with_dtype(DType::Int64))), Catch::Contains("exp: expected a float32"));
}

TEST_CASE("gradcheck reports the worst element of a wrong backward") {
  // a deliberately wrong op: forward x*x, backward claims x
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor out = in[0].detach() * in[0].detach();
    return record_op("wrong_square", out, {in[0]}, [x = in[0].detach()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{g * x};
    });
  };
  auto result = gradcheck(wrong, {tensor({1.0, 2.0}, {2}, TensorOptions{}.with_dtype(DType::Float64))});
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.message, Catch::Contains("input 0") && Catch::Contains("element 1"));
}

TEST_CASE("arithmetic gradients are right for broadcast shapes") {
  rc::prop("add, sub, mul, div", [] {
    const auto shapes = *gen::broadcast_pair();
    const Tensor a = *gen::tensor_of_shape(shapes.first);
    const Tensor b = *gen::tensor_of_shape(shapes.second, 0.5, 2.0);
    const int which = *rc::gen::inRange(0, 4);
    TAPEGRAD_RC_GRADCHECK(([which](const std::vector<Tensor>& x) {
                            switch (which) {
                              case 0: return add(x[0], x[1]);
                              case 1: return sub(x[0], x[1]);
                              case 2: return mul(x[0], x[1]);
                              default: return div(x[0], x[1]);
                            }
                          }),
                          (std::vector<Tensor>{a, b}));
  });
}

TEST_CASE("second derivatives of arithmetic are right") {
  rc::prop("mul, div, exp, log", [] {
    const auto shapes = *gen::broadcast_pair(2, 3);
    const Tensor a = *gen::tensor_of_shape(shapes.first, 0.5, 2.0);
    const Tensor b = *gen::tensor_of_shape(shapes.second, 0.5, 2.0);
    TAPEGRAD_RC_GRADGRADCHECK(
        [](const std::vector<Tensor>& x) { return div(mul(exp(x[0]), x[1]), log(x[1] + 1.0)); },
        (std::vector<Tensor>{a, b}));
  });
}
