// The computations of the libtorch autograd tutorial, on tapegrad: gradients of a small expression, a
// vector-Jacobian product through a data-dependent loop, switching recording off, a gradient penalty through a
// second-order gradient (create_graph), and two custom differentiable functions. Each section prints what it
// computes and checks it against the closed form; the exit code is the number of failed checks.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what);
  if (!ok) ++failures;
}

bool close(const Tensor& a, const Tensor& b, double tolerance = 1e-5) {
  if (a.shape() != b.shape()) return false;
  return max(abs(a.to(DType::Float64) - b.to(DType::Float64))).item() <= tolerance;
}

Tensor norm(const Tensor& x) { return sqrt(sum(square(x))); }

void basic_operations() {
  std::cout << "== gradients of a small expression ==\n";
  const Tensor x = ones({2, 2}, TensorOptions{}.with_requires_grad());
  const Tensor y = x + 2;
  std::cout << "y = x + 2:\n" << y << "\ny was made by " << y.grad_fn_name() << "\n";
  const Tensor z = y * y * 3;
  const Tensor out = mean(z);
  std::cout << "z = 3 y^2:\n" << z << "\nout = mean(z) = " << out.item() << " (made by " << out.grad_fn_name() << ")\n";
  check(out.item() == 27.0, "mean(3 (1 + 2)^2) = 27");

  // requires_grad_ switches recording on for a tensor made without it.
  Tensor a = randn({2, 2});
  a = (a * 3) / (a - 1);
  check(!a.requires_grad(), "a tensor computed from plain tensors does not require grad");
  a.requires_grad_(true);
  const Tensor b = sum(a * a);
  check(a.requires_grad() && b.requires_grad(), "after requires_grad_, results computed from it do");
  std::cout << "b = sum(a * a) was made by " << b.grad_fn_name() << "\n";

  out.backward();
  std::cout << "d(out)/dx:\n" << x.grad() << "\n";
  // out = mean(3 (x + 2)^2) over 4 elements: d/dx = 6 (x + 2) / 4 = 4.5.
  check(close(x.grad(), full({2, 2}, 4.5)), "d(out)/dx = 6 (x + 2) / 4 = 4.5 everywhere");
}

void vector_jacobian_product() {
  std::cout << "\n== a vector-Jacobian product through a loop ==\n";
  const Tensor x = randn({3}, default_generator(), TensorOptions{}.with_requires_grad());
  Tensor y = x * 2;
  int doublings = 1;
  while (norm(y).item() < 1000) {
    y = y * 2;
    ++doublings;
  }
  std::cout << "y = x * 2^" << doublings << ":\n" << y << "\n";
  // y is not a scalar: backward takes the vector v and gives v^T dy/dx = v * 2^doublings.
  const Tensor v = tensor({0.1, 1.0, 0.0001}, {3});
  y.backward(v);
  std::cout << "v^T dy/dx:\n" << x.grad() << "\n";
  check(close(x.grad(), v * std::pow(2.0, doublings), 1e-3), "v^T dy/dx = v * 2^k");

  std::cout << "\n== switching recording off ==\n";
  check(x.requires_grad() && pow(x, 2).requires_grad(), "x**2 requires grad when x does");
  {
    NoGradGuard no_grad;
    check(!pow(x, 2).requires_grad(), "under NoGradGuard it does not");
  }
  const Tensor detached = x.detach();
  check(!detached.requires_grad(), "x.detach() does not require grad");
  check(close(detached, x, 0.0), "and holds x's values");
}

void higher_order_gradients() {
  std::cout << "\n== a gradient penalty (second-order gradients) ==\n";
  nn::Linear model(4, 3);
  const Tensor input = randn({3, 4}, default_generator(), TensorOptions{}.with_requires_grad());
  const Tensor output = model(input);
  const Tensor target = randn({3, 3});
  const Tensor loss = mse_loss(output, target);
  // d(sum of outputs)/d(input), kept differentiable so the penalty below can be backpropagated.
  const Tensor gradient = autograd::grad({output}, {input}, {ones_like(output)}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  const Tensor penalty = mean(square(sqrt(sum(square(gradient), {1})) - 1));
  const Tensor combined = loss + penalty;
  combined.backward();
  std::cout << "d(loss + penalty)/d(input):\n" << input.grad() << "\n";
  // The input gradient of the output sum is each row's copy of the column sums of W, which do not depend on the
  // input: the penalty contributes nothing to d/d(input), which is then the MSE term's W^T (2 (y - t) / 9).
  const Tensor expected = matmul((output.detach() - target) * (2.0 / 9.0), model.weight.detach());
  check(close(input.grad(), expected), "the penalty adds nothing to d/d(input) for a linear model");
  check(close(gradient.detach(), broadcast_to(sum(model.weight.detach(), {0}, true), input.shape())),
        "d(sum output)/d(input) = column sums of W");
  check(model.weight.grad().defined(), "the penalty reaches the weight (through create_graph)");
}

// A custom differentiable function is a forward computed without recording plus a backward closure, put on the
// tape with record_op (tapegrad/framework/autograd/function.h).
Tensor linear_function(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  Tensor output;
  {
    NoGradGuard no_grad;
    output = matmul(input, transpose(weight, 0, 1)) + bias;
  }
  return record_if_needed("linear_function", output, {input, weight, bias}, [&] {
    return [saved_input = SavedTensor(input, "linear_function"), saved_weight = SavedTensor(weight, "linear_function")](
               const Tensor& grad_output, NeedsGrad needs) {
      const Tensor& x = saved_input.get();
      const Tensor& w = saved_weight.get();
      return std::vector<Tensor>{needs[0] ? matmul(grad_output, w) : Tensor(),
                                 needs[1] ? matmul(transpose(grad_output, 0, 1), x) : Tensor(),
                                 needs[2] ? sum(grad_output, {0}) : Tensor()};
    };
  });
}

Tensor mul_constant(const Tensor& x, double constant) {
  Tensor output;
  {
    NoGradGuard no_grad;
    output = x * constant;
  }
  return record_if_needed("mul_constant", output, {x}, [&] {
    return [constant](const Tensor& grad_output, NeedsGrad) { return std::vector<Tensor>{grad_output * constant}; };
  });
}

void custom_functions() {
  std::cout << "\n== custom differentiable functions ==\n";
  const TensorOptions with_grad = TensorOptions{}.with_dtype(DType::Float64).with_requires_grad();
  const Tensor x = randn({2, 3}, default_generator(), with_grad);
  const Tensor weight = randn({4, 3}, default_generator(), with_grad);
  const Tensor bias = randn({4}, default_generator(), with_grad);
  const Tensor y = linear_function(x, weight, bias);
  std::cout << "linear_function made by " << y.grad_fn_name() << "\n";
  sum(y).backward();
  std::cout << "d(sum y)/dx:\n" << x.grad() << "\nd(sum y)/dweight:\n" << weight.grad() << "\n";
  check(close(x.grad(), broadcast_to(sum(weight.detach(), {0}, true), {2, 3}), 1e-12), "d/dx = column sums of W");
  check(close(weight.grad(), broadcast_to(sum(x.detach(), {0}, true), {4, 3}), 1e-12), "d/dW = column sums of x");
  check(close(bias.grad(), full({4}, 2.0, TensorOptions{}.with_dtype(DType::Float64)), 1e-12), "d/db = N = 2");
  const auto result = gradcheck([](const std::vector<Tensor>& v) { return linear_function(v[0], v[1], v[2]); },
                                {x.detach().requires_grad_(), weight.detach().requires_grad_(),
                                 bias.detach().requires_grad_()});
  check(result.ok, "linear_function passes gradcheck");

  const Tensor a = randn({2}, default_generator(), TensorOptions{}.with_requires_grad());
  sum(mul_constant(a, 5.5)).backward();
  std::cout << "d(sum 5.5 a)/da:\n" << a.grad() << "\n";
  check(close(a.grad(), full({2}, 5.5)), "d(5.5 a)/da = 5.5");
}

}  // namespace

int main() {
  manual_seed(0);
  basic_operations();
  vector_jacobian_product();
  higher_order_gradients();
  custom_functions();
  std::printf("\n%s: %d failed check(s)\n", failures == 0 ? "all checks passed" : "FAILED", failures);
  return failures;
}
