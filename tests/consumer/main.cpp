// Builds against the installed package only: a small expression, its backward, and a check of the result.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace tapegrad;
  Tensor x = tensor({0.5, -1.0, 2.0}, {3}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  Tensor y = sum(x * exp(x) + 3.0 * x);  // dy/dx = (1 + x) e^x + 3
  y.backward();
  std::printf("y = %s\nx.grad = %s\n", to_string(y).c_str(), to_string(x.grad()).c_str());
  std::vector<double> grad = x.grad().to_vector();
  const double xs[] = {0.5, -1.0, 2.0};
  for (int i = 0; i < 3; ++i) {
    double expected = (1 + xs[i]) * std::exp(xs[i]) + 3;
    if (std::abs(grad[i] - expected) > 1e-12) {
      std::printf("consumer: wrong gradient at %d: %g != %g\n", i, grad[i], expected);
      return 1;
    }
  }
  std::printf("consumer: OK (tapegrad %s)\n", "found through find_package");
  return 0;
}
