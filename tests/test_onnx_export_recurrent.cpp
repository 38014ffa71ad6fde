// RNN (tanh), LSTM and GRU exported as ONNX's own RNN / LSTM / GRU nodes and run by ONNX Runtime: outputs and final
// states match tapegrad's (float32, 1e-5 relative) across layers, directions, batch_first, unbatched input, given
// or zero initial states, no bias, and a batch size other than the traced one; what ONNX cannot express is a clear
// error with no file left.
#include <onnx/onnx_pb.h>

#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/recipes.h"
#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/tapegrad.h>

#include "support/error_of.h"
#include "support/onnx_runtime.h"

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

std::string temp_model(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / fmt::format("tapegrad_rnn_{}_{}.onnx", stem, ::getpid())).string();
}

// output, h_n (and c_n for LSTM) of `layer` on `inputs` = {x[, h0[, c0]]}.
std::vector<Tensor> run_layer(nn::Module& layer, const std::vector<Tensor>& in) {
  const Tensor h0 = in.size() > 1 ? in[1] : Tensor(), c0 = in.size() > 2 ? in[2] : Tensor();
  if (auto* lstm = dynamic_cast<nn::LSTM*>(&layer)) {
    const nn::LSTMResult r = lstm->forward_with_state(in[0], h0, c0);
    return {r.output, r.h_n, r.c_n};
  }
  if (auto* gru = dynamic_cast<nn::GRU*>(&layer)) {
    const nn::RNNResult r = gru->forward_with_state(in[0], h0);
    return {r.output, r.h_n};
  }
  const nn::RNNResult r = dynamic_cast<nn::RNN&>(layer).forward_with_state(in[0], h0);
  return {r.output, r.h_n};
}

// How many nodes of `op_type` the file at `path` holds.
int count_nodes(const std::string& path, const std::string& op_type) {
  std::ifstream in(path, std::ios::binary);
  ::onnx::ModelProto model;
  REQUIRE(model.ParseFromIstream(&in));
  int count = 0;
  for (const auto& node : model.graph().node()) count += node.op_type() == op_type;
  return count;
}

// Exports `layer` traced on `traced`, checks that it holds `layers` nodes of `op_type` (ONNX's own recurrent op,
// one per layer), then runs ONNX Runtime on `checked` (the same names, possibly another batch) and compares every
// output with tapegrad's on `checked`.
void check_against_onnx_runtime(nn::Module& layer, const std::string& op_type, int layers,
                                const std::vector<std::string>& names, const std::vector<Tensor>& traced,
                                const std::vector<Tensor>& checked,
                                const std::map<std::string, std::vector<std::int64_t>>& dynamic_axes = {}) {
  const std::string path = temp_model("check");
  tapegrad::onnx::ExportOptions options;
  options.input_names = names;
  options.dynamic_axes = dynamic_axes;
  tapegrad::onnx::export_onnx(layer, run_layer, traced, path, options);
  CHECK(count_nodes(path, op_type) == layers);
  std::vector<Tensor> expected;
  {
    NoGradGuard no_grad;
    layer.eval();
    expected = run_layer(layer, checked);
  }
  std::vector<NamedTensor> feeds;
  for (std::size_t i = 0; i < names.size(); ++i) feeds.push_back({names[i], checked[i]});
  const std::vector<Tensor> outputs = run_in_onnx_runtime(path, feeds);
  std::filesystem::remove(path);
  REQUIRE(outputs.size() == expected.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    INFO("output " << i);
    CHECK(compare_outputs(expected[i], outputs[i], 1e-5, 1e-6) == "");
  }
}

}  // namespace

TEST_CASE("a one-layer LSTM exports as one ONNX LSTM and runs at another batch size than the traced one") {
  manual_seed(1);
  nn::LSTM lstm(3, 4);
  check_against_onnx_runtime(lstm, "LSTM", 1, {"x"}, {randn({5, 2, 3})}, {randn({5, 3, 3})}, {{"x", {1}}});
}

TEST_CASE("a bidirectional two-layer batch_first LSTM with given h0 and c0: output, h_n and c_n") {
  manual_seed(2);
  nn::LSTM lstm(nn::LSTMOptions(3, 5).with_num_layers(2).with_bidirectional(true).with_batch_first(true));
  const std::vector<Tensor> in{randn({2, 4, 3}), randn({4, 2, 5}), randn({4, 2, 5})};
  check_against_onnx_runtime(lstm, "LSTM", 2, {"x", "h0", "c0"}, in, in);
}

TEST_CASE("GRU: bidirectional two layers with h0, and batch_first without bias (PyTorch's reset-gate placement)") {
  manual_seed(3);
  nn::GRU gru(nn::GRUOptions(4, 3).with_num_layers(2).with_bidirectional(true));
  const std::vector<Tensor> in{randn({6, 2, 4}), randn({4, 2, 3})};
  check_against_onnx_runtime(gru, "GRU", 2, {"x", "h0"}, in, in);
  nn::GRU plain(nn::GRUOptions(2, 4).with_bias(false).with_batch_first(true));
  const std::vector<Tensor> x{randn({3, 5, 2})};
  check_against_onnx_runtime(plain, "GRU", 1, {"x"}, x, x);
}

TEST_CASE("a two-layer tanh RNN on an unbatched sequence with h0") {
  manual_seed(4);
  nn::RNN rnn(nn::RNNOptions(3, 4).with_num_layers(2));
  const std::vector<Tensor> in{randn({5, 3}), randn({2, 4})};
  check_against_onnx_runtime(rnn, "RNN", 2, {"x", "h0"}, in, in);
}


TEST_CASE("the fashion_mnist_lstm example's model exports with a dynamic batch and matches at another batch") {
  manual_seed(6);
  // The fashion_mnist_lstm example's model itself (examples/common/recipes.cpp), at a smaller width.
  const std::shared_ptr<nn::Module> lstm_model = examples::make_lstm(16);
  nn::Module& model = *lstm_model;
  const std::string path = temp_model("row_lstm");
  tapegrad::onnx::ExportOptions options;
  options.dynamic_axes = {{"input", {0}}, {"output", {0}}};
  tapegrad::onnx::export_onnx(model, {randn({2, 1, 28, 28})}, path, options);
  CHECK(count_nodes(path, "LSTM") == 2);
  const Tensor images = randn({3, 1, 28, 28});
  const std::vector<Tensor> outputs = run_in_onnx_runtime(path, {{"input", images}});
  std::filesystem::remove(path);
  NoGradGuard no_grad;
  model.eval();
  REQUIRE(outputs.size() == 1);
  CHECK(compare_outputs(model.forward(images), outputs[0], 1e-5, 1e-6) == "");
}

TEST_CASE("a bidirectional two-layer ReLU RNN with h0 (ONNX's RNN with activations=Relu per direction)") {
  manual_seed(12);
  nn::RNN rnn(nn::RNNOptions(3, 4).with_num_layers(2).with_bidirectional(true).with_nonlinearity(
      nn::RNNNonlinearity::ReLU));
  const std::vector<Tensor> in{randn({5, 2, 3}), randn({4, 2, 4})};
  check_against_onnx_runtime(rnn, "RNN", 2, {"x", "h0"}, in, in);
}

TEST_CASE("an LSTM with proj_size is refused, naming why, with no file left") {
  manual_seed(5);
  const std::string path = temp_model("refused");
  nn::LSTM projected(nn::LSTMOptions(3, 4).with_proj_size(2));
  CHECK_THAT(error_of([&] {
               tapegrad::onnx::export_onnx(projected, {randn({2, 1, 3})}, path);
             }),
             Catch::Contains("nn.recurrent") && Catch::Contains("proj_size"));
  CHECK_FALSE(std::filesystem::exists(path));
}
