// The ONNX Runtime runner itself (tests/onnx/run_model.js through tests/support/onnx_runtime.h), checked on models
// PyTorch exported (tests/reference/make_onnx_reference.py), so that a wrong runner cannot hide behind a wrong
// exporter: inputs of every dtype go in by name, outputs come back in the model's order with PyTorch's values.
// Note: no libonnx here; this test runs whether or not the ONNX export component is built. Without ONNX Runtime
// installed it fails (bash scripts/setup_onnxruntime.sh installs it), as CI must see.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <tapegrad/tapegrad.h>

#include <tapegrad/framework/testing/compare.h>

#include "support/error_of.h"
#include "support/onnx_runtime.h"
#include "support/reference_file.h"

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

std::string data_file(const std::string& name) { return std::string(TAPEGRAD_TEST_DATA_DIR) + "/" + name; }

// Sets an environment variable for one scope, restoring the old value.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnvironment() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("ONNX Runtime is installed (bash scripts/setup_onnxruntime.sh)") {
  INFO(onnx_runtime_unavailable_reason());
  REQUIRE(onnx_runtime_available());
}

TEST_CASE("a PyTorch-exported model with float32 and int64 inputs gives PyTorch's outputs, in the model's order") {
  const auto ref = load_reference_file("onnx_runner_reference.txt");
  const Tensor x = reference_entry(ref, "mixed/x").to(DType::Float32);
  const Tensor tokens = reference_entry(ref, "mixed/tokens").to(DType::Int64);
  const std::string model = data_file("onnx_runner_mixed.onnx");
  // Inputs given in the other order than the model declares them: they are matched by name.
  const std::vector<Tensor> outputs = run_in_onnx_runtime(model, {{"tokens", tokens}, {"x", x}});
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].dtype() == DType::Float32);
  CHECK(compare_outputs(reference_entry(ref, "mixed/y"), outputs[0], 1e-5, 1e-6).empty());
  CHECK(compare_outputs(reference_entry(ref, "mixed/p"), outputs[1], 1e-5, 1e-6).empty());

  SECTION("in slices of the batch axis and on two threads: the same values") {
    const std::vector<Tensor> sliced = run_in_onnx_runtime(model, {{"x", x}, {"tokens", tokens}},
                                                           OnnxRuntimeOptions{.threads = 2, .batches = 2});
    REQUIRE(sliced.size() == 2);
    CHECK(compare_outputs(outputs[0], sliced[0], 0, 0).empty());
    CHECK(compare_outputs(outputs[1], sliced[1], 0, 0).empty());
  }
}

TEST_CASE("a float64 model runs in float64 and gives PyTorch's outputs to float64 precision") {
  const auto ref = load_reference_file("onnx_runner_reference.txt");
  const std::vector<Tensor> outputs =
      run_in_onnx_runtime(data_file("onnx_runner_float64.onnx"), {{"x", reference_entry(ref, "float64/x")}});
  REQUIRE(outputs.size() == 1);
  CHECK(outputs[0].dtype() == DType::Float64);
  CHECK(compare_outputs(reference_entry(ref, "float64/y"), outputs[0], 1e-12, 1e-14).empty());
}

TEST_CASE("a run that ONNX Runtime refuses is a tapegrad::Error quoting its message") {
  const auto ref = load_reference_file("onnx_runner_reference.txt");
  const std::string model = data_file("onnx_runner_mixed.onnx");
  // A missing input is the runner's own check; a missing file is ONNX Runtime's.
  CHECK_THAT(error_of([&] { run_in_onnx_runtime(model, {{"x", reference_entry(ref, "mixed/x").to(DType::Float32)}}); }),
             Catch::Contains("ONNX Runtime failed") && Catch::Contains("input 'tokens' is not in the input file"));
  CHECK_THAT(error_of([&] { run_in_onnx_runtime(data_file("no_such_model.onnx"), {}); }),
             Catch::Contains("ONNX Runtime failed") && Catch::Contains("no_such_model.onnx"));
}

TEST_CASE("without the installed package, running a model fails and says how to install it") {
  ScopedEnvironment missing("TAPEGRAD_ONNXRUNTIME_DIR", "/nonexistent/tapegrad_onnxruntime");
  CHECK_FALSE(onnx_runtime_available());
  CHECK_THAT(error_of([&] { run_in_onnx_runtime(data_file("onnx_runner_mixed.onnx"), {}); }),
             Catch::Contains("onnxruntime-node is not installed") &&
                 Catch::Contains("bash scripts/setup_onnxruntime.sh"));
}

TEST_CASE("tensor files round-trip every dtype, a 0-dim and an empty tensor, bit for bit") {
  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_tensor_file_test.tgt").string();
  const std::vector<NamedTensor> written{
      {"f32", from_vector(std::vector<float>{1.5f, -0.0f, 3.25e-20f, 7.0f, 1e30f, -2.0f}, {2, 3})},
      {"f64", from_vector(std::vector<double>{0.1, -1e-300}, {2})},
      {"i64", from_vector(std::vector<std::int64_t>{-(std::int64_t{1} << 62), 3}, {2, 1})},
      {"scalar", scalar_tensor(2.5, DType::Float64)},
      {"empty", zeros({0, 4})}};
  write_tensor_file(path, written);
  const std::vector<NamedTensor> read = read_tensor_file(path);
  std::filesystem::remove(path);
  REQUIRE(read.size() == written.size());
  for (std::size_t i = 0; i < read.size(); ++i) {
    INFO(written[i].name);
    CHECK(read[i].name == written[i].name);
    CHECK(read[i].value.dtype() == written[i].value.dtype());
    CHECK(read[i].value.shape() == written[i].value.shape());
    CHECK(static_cast<bool>(identical(read[i].value, written[i].value)));
  }
  CHECK(read[2].value.data<std::int64_t>()[0] == -(std::int64_t{1} << 62));
}
