// docs/onnx.md's example, compiled and run: the code between the DOC markers is exactly the page's snippet (the
// last test case checks that); the first runs it and checks the file it writes with ONNX and ONNX Runtime.
#include <filesystem>

#include "support/doc_snippet.h"
#include "support/onnx_model_check.h"
#include "support/onnx_runtime.h"

// DOC-BEGIN
#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

// A small CNN for 28 x 28 images, exported with a dynamic batch axis: the file runs at any batch size.
void export_cnn(const std::string& path) {
  nn::Sequential model(nn::Conv2d(nn::Conv2dOptions{1, 8, 3}.with_padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Flatten(), nn::Linear(nn::LinearOptions{8 * 14 * 14, 10}));
  // ... train it ...
  tapegrad::onnx::ExportOptions options;
  options.input_names = {"images"};
  options.output_names = {"logits"};
  options.dynamic_axes = {{"images", {0}}, {"logits", {0}}};
  options.fold_batchnorm = true;  // or false: BatchNormalization nodes with the running statistics
  tapegrad::onnx::export_onnx(model, {randn({1, 1, 28, 28})}, path, options);
}
// DOC-END

TEST_CASE("the page's example writes a model that ONNX checks and ONNX Runtime runs at any batch size") {
  const std::string path = (std::filesystem::temp_directory_path() / "tapegrad_docs_cnn.onnx").string();
  export_cnn(path);
  const auto s = tapegrad::testing::check_onnx_file(path);
  CHECK(s.inputs == std::vector<std::string>{"images"});
  CHECK(s.output_dims[0] == std::vector<std::string>{"images_dim0", "10"});
  CHECK(s.count("BatchNormalization") == 0);
  const auto out = tapegrad::testing::run_in_onnx_runtime(path, {{"images", randn({5, 1, 28, 28})}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{5, 10});
  std::filesystem::remove(path);
}

TEST_CASE("docs/onnx.md quotes this example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_onnx_export_docs.cpp", "docs/onnx.md");
}
