// ONNX export of whole models and its options: the unsupported-op error (op and layer named, no file left),
// dynamic batch axes run at other batch sizes, BatchNorm folded or kept, a ResNet basic block, float64, names,
// opset, and the module's flags left as they were.
#include <fstream>

#include "support/error_of.h"
#include "support/onnx_export_check.h"

using namespace tapegrad;
using tapegrad::testing::check_export;
using tapegrad::testing::check_onnx_file;
using tapegrad::testing::dims_of;
using tapegrad::testing::Lambda;
using tapegrad::testing::error_of;
using tapegrad::testing::onnx_temp_path;
using tapegrad::testing::randomize_statistics;

namespace {

Tensor input_of(const Shape& shape, std::uint64_t seed = 1) {
  Generator generator(seed);
  return randn(shape, generator);
}

// A model whose forward calls its children itself, as most user models do.
class Net : public nn::Module {
 public:
  explicit Net(std::function<Tensor(const Tensor&)> tail) : Module("Net") {
    features = register_module("features", std::make_shared<nn::Sequential>(nn::Conv2d(nn::Conv2dOptions{1, 2, 3}),
                                                                            nn::ReLU(), Lambda(std::move(tail))));
  }
  Tensor forward(const Tensor& x) override { return features->forward(x); }
  std::shared_ptr<nn::Sequential> features;
};

// ResNet's basic block with a strided 1x1 projection shortcut: out = relu(bn2(conv2(relu(bn1(conv1(x))))) + proj(x)).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(std::int64_t in, std::int64_t out) : Module("BasicBlock") {
    conv1 = register_module("conv1",
                            nn::Conv2d(nn::Conv2dOptions{in, out, 3}.with_stride(2).with_padding(1).with_bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions{out, out, 3}.with_padding(1).with_bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    shortcut = register_module(
        "shortcut",
        std::make_shared<nn::Sequential>(nn::Conv2d(nn::Conv2dOptions{in, out, 1}.with_stride(2).with_bias(false)),
                                         nn::BatchNorm2d(out)));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    y += shortcut->forward(x);
    return y.relu_();
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;
};

bool exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

TEST_CASE("an op without an ONNX mapping is an error naming the op and the layer; no file is left") {
  manual_seed(0);
  Net net([](const Tensor& x) { return flip(x, {3}); });
  const std::string path = onnx_temp_path("unsupported");
  const std::string message = error_of([&] { tapegrad::onnx::export_onnx(net, {input_of({1, 1, 5, 5})}, path); });
  CHECK_THAT(message, Catch::Contains("op 'flip'"));
  CHECK_THAT(message, Catch::Contains("features.2 (Lambda)"));
  CHECK_THAT(message, Catch::Contains("no ONNX mapping"));
  CHECK_FALSE(exists(path));
  // An existing file stays as it was; no temporary is left beside it.
  { std::ofstream(path) << "previous"; }
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(net, {input_of({1, 1, 5, 5})}, path);
             }),
             Catch::Contains("flip"));
  std::string content;
  std::getline(std::ifstream(path), content);
  CHECK(content == "previous");
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    CHECK(entry.path().string().rfind(path + ".tmp", 0) != 0);
  std::filesystem::remove(path);
}

// A module that calls its child directly (no Sequential around it).
class Head : public nn::Module {
 public:
  Head() : Module("Head") { conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions{2, 3, 3})); }
  // flip reads conv1's weight, so the error names conv1 though no Sequential ran it.
  Tensor forward(const Tensor& x) override { return conv2d(x, flip(conv1->weight, {3}), conv1->bias); }
  std::shared_ptr<nn::Conv2d> conv1;
};

TEST_CASE("a layer's parameters name it when it runs outside a Sequential") {
  Head head;
  const std::string path = onnx_temp_path("x");
  const std::string message = error_of([&] { tapegrad::onnx::export_onnx(head, {input_of({1, 2, 5, 5})}, path); });
  CHECK_THAT(message, Catch::Contains("op 'flip' (in conv1 (Conv2d))"));
  CHECK_FALSE(exists(path));
}

TEST_CASE("a dynamic batch axis: one file runs at every batch size") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(1);
  nn::Sequential cnn(nn::Conv2d(nn::Conv2dOptions{1, 4, 3}.with_padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(nn::LinearOptions{4 * 3 * 3, 5}), nn::LogSoftmax(1));
  randomize_statistics(cnn);
  tapegrad::onnx::ExportOptions options;
  options.dynamic_axes = {{"input", {0}}, {"output", {0}}};
  const auto s = check_export(cnn, input_of({2, 1, 6, 6}), {"input_dim0", "5"}, options,
                              {input_of({1, 1, 6, 6}, 2), input_of({7, 1, 6, 6}, 3)});
  CHECK(s.count("Reshape") == 1);

  // Reshapes that merge the batch into -1 or keep it by size(0), slices to the end, sums over the batch.
  Lambda f([](const Tensor& x) {  // x: [N, 4]
    Tensor a = x.reshape({-1, 2}).reshape({x.size(0), 4});
    Tensor b = cat({slice(a, 0, 1, x.size(0)), slice(a, 0, 0, 1)}, 0);
    return add(mul(b, a), sum(x, {0}, true));
  });
  // (ONNX's inference loses the batch's name through the -1 reshape: "*" accepts any symbolic extent.)
  check_export(f, input_of({3, 4}), {"*", "4"}, options, {input_of({6, 4}, 4)});

  nn::Embedding embedding(nn::EmbeddingOptions{9, 2});
  tapegrad::onnx::ExportOptions tokens;
  tokens.dynamic_axes = {{"input", {0, 1}}};
  check_export(embedding, from_vector(std::vector<std::int64_t>{1, 2, 3, 8, 0, 4}, {2, 3}),
               {"input_dim0", "input_dim1", "2"}, tokens, {from_vector(std::vector<std::int64_t>{5, 6, 7, 1}, {1, 4})});
}

TEST_CASE("a constant whose shape follows the batch cannot be exported with a dynamic batch") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  Lambda f([](const Tensor& x) { return add(x, ones({x.size(0), 3})); });
  tapegrad::onnx::ExportOptions options;
  options.dynamic_axes = {{"input", {0}}};
  const std::string path = onnx_temp_path("dynamic");
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(f, {input_of({2, 3})}, path, options);
             }),
             Catch::Contains("depends on a dynamic axis"));
  CHECK_FALSE(exists(path));
  // Without the dynamic axis the same model exports (the constant is fixed at batch 2).
  check_export(f, input_of({2, 3}), dims_of({2, 3}));
  options.dynamic_axes = {{"labels", {0}}};
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(f, {input_of({2, 3})}, path, options);
             }),
             Catch::Contains("'labels', which is no input or output"));
}

TEST_CASE("BatchNorm folded into the Conv and Linear before it, or kept as BatchNormalization: same outputs") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(2);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions{2, 3, 3}), nn::BatchNorm2d(3), nn::ReLU(), nn::Flatten(),
                     nn::Linear(nn::LinearOptions{3 * 3 * 3, 4}), nn::BatchNorm1d(4));
  randomize_statistics(net);
  const auto kept = check_export(net, input_of({3, 2, 5, 5}), dims_of({3, 4}));
  CHECK(kept.count("BatchNormalization") == 2);
  CHECK(kept.has_initializer("1.running_var"));
  tapegrad::onnx::ExportOptions fold;
  fold.fold_batchnorm = true;
  const auto folded = check_export(net, input_of({3, 2, 5, 5}), dims_of({3, 4}), fold, {}, 1e-5, 1e-5);
  CHECK(folded.count("BatchNormalization") == 0);
  CHECK_FALSE(folded.has_initializer("1.running_var"));
  CHECK(folded.has_initializer("0.bias"));
  CHECK(folded.count("Conv") == 1);
  CHECK(folded.count("Gemm") == 1);
}

TEST_CASE("a ResNet basic block (projection shortcut, out += shortcut, relu_) exports and matches") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(3);
  BasicBlock block(3, 4);
  randomize_statistics(block);
  tapegrad::onnx::ExportOptions options;
  options.dynamic_axes = {{"input", {0}}};
  const auto s =
      check_export(block, input_of({2, 3, 8, 8}), {"input_dim0", "4", "4", "4"}, options, {input_of({5, 3, 8, 8}, 4)});
  CHECK(s.count("Conv") == 3);
  CHECK(s.count("BatchNormalization") == 3);
  CHECK(s.count("Add") == 1);
  CHECK(s.count("Relu") == 2);
  for (const char* name : {"conv1.weight", "bn1.running_mean", "shortcut.0.weight", "shortcut.1.running_var"})
    CHECK(s.has_initializer(name));
  // Folding needs each BatchNorm right after its layer in a Sequential: fuse_batchnorm's error, and no file.
  tapegrad::onnx::ExportOptions fold;
  fold.fold_batchnorm = true;
  const std::string path = onnx_temp_path("fold");
  CHECK(error_of([&] { tapegrad::onnx::export_onnx(block, {input_of({2, 3, 8, 8})}, path, fold); }) != "<no error>");
  CHECK_FALSE(exists(path));
}

TEST_CASE("float64 export, names, opsets, and the module's own flags and dtype are kept") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(4);
  nn::Sequential mlp(nn::Linear(nn::LinearOptions{5, 8}), nn::Tanh(), nn::Dropout(0.2),
                     nn::Linear(nn::LinearOptions{8, 3}));
  mlp.train();
  tapegrad::onnx::ExportOptions f64;
  f64.dtype = DType::Float64;
  f64.input_names = {"features"};
  f64.output_names = {"scores"};
  const auto s = check_export(mlp, input_of({4, 5}), dims_of({4, 3}), f64, {}, 1e-12, 1e-12);
  CHECK(s.inputs == std::vector<std::string>{"features"});
  CHECK(s.outputs == std::vector<std::string>{"scores"});
  CHECK(s.model.graph().input(0).type().tensor_type().elem_type() == ::onnx::TensorProto_DataType_DOUBLE);
  CHECK(mlp.is_training());
  CHECK(mlp[2]->is_training());
  CHECK(mlp.parameters()[0].dtype() == DType::Float32);
  for (int opset : {14, 15, 16, 17}) {
    tapegrad::onnx::ExportOptions options;
    options.opset = opset;
    CHECK(check_export(mlp, input_of({2, 5}), dims_of({2, 3}), options).opset == opset);
  }
  tapegrad::onnx::ExportOptions bad;
  bad.opset = 18;
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(mlp, {input_of({2, 5})}, onnx_temp_path("x"), bad);
             }),
             Catch::Contains("opset 18 is not supported"));
  bad = {};
  bad.input_names = {"a", "b"};
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(mlp, {input_of({2, 5})}, onnx_temp_path("x"), bad);
             }),
             Catch::Contains("2 input names for 1 example inputs"));
  bad = {};
  bad.input_names = {"0.weight"};
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(mlp, {input_of({2, 5})}, onnx_temp_path("x"), bad);
             }),
             Catch::Contains("input name '0.weight' is taken"));
}

TEST_CASE("a forward of several inputs and outputs exports through a forward function") {
  manual_seed(5);
  nn::Linear fc(nn::LinearOptions{3, 2});
  tapegrad::onnx::ModuleForward forward = [](nn::Module& m, const std::vector<Tensor>& in) {
    Tensor y = m.forward(in[0]);
    return std::vector<Tensor>{add(y, in[1]), in[1]};
  };
  const std::string path = onnx_temp_path("two");
  tapegrad::onnx::export_onnx(fc, forward, {input_of({4, 3}), input_of({4, 2}, 2)}, path);
  const auto s = check_onnx_file(path);
  CHECK(s.inputs == std::vector<std::string>{"input_0", "input_1"});
  CHECK(s.outputs == std::vector<std::string>{"output_0", "output_1"});
  CHECK(s.output_dims[1] == dims_of({4, 2}));
  const auto got =
      tapegrad::testing::run_in_onnx_runtime(path, {{"input_0", input_of({4, 3})}, {"input_1", input_of({4, 2}, 2)}});
  REQUIRE(got.size() == 2);
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = add(fc.forward(input_of({4, 3})), input_of({4, 2}, 2));
  }
  CHECK(tapegrad::testing::compare_outputs(expected, got[0]) == "");
  CHECK(tapegrad::testing::compare_outputs(input_of({4, 2}, 2), got[1]) == "");
  std::filesystem::remove(path);
}
