// Builds against the installed package only: a small expression, its backward, and a check of the result.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <filesystem>

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
  // The PyTorch formats (libzip and nlohmann_json inside the library) link through the package too.
  manual_seed(1);
  nn::Linear layer(3, 2);
  manual_seed(2);
  nn::Linear copy(3, 2);
  for (const bool pytorch : {true, false}) {
    const std::string path =
        (std::filesystem::temp_directory_path() / (pytorch ? "tapegrad-consumer.pt" : "tapegrad-consumer.safetensors"))
            .string();
    pytorch ? save_pytorch(layer, path) : save_safetensors(layer, path);
    pytorch ? load_pytorch(copy, path) : load_safetensors(copy, path);
    std::filesystem::remove(path);
    if (copy.weight.to_vector() != layer.weight.to_vector()) {
      std::printf("consumer: %s did not round-trip\n", path.c_str());
      return 1;
    }
  }
  // The headers compiled against and the library loaded must be one release.
  if (std::string(tapegrad::version()) != TAPEGRAD_VERSION_STRING) {
    std::printf("consumer: headers %s but library %s\n", TAPEGRAD_VERSION_STRING, tapegrad::version());
    return 1;
  }
  std::printf("consumer: OK (tapegrad %s)\n", tapegrad::version());
  return 0;
}
