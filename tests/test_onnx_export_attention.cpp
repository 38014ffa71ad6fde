// Attention exported to ONNX (MatMul / Softmax subgraphs of scaled_dot_product_attention) and run by ONNX Runtime:
// the op with additive, keep and causal masks, MultiheadAttention (self and cross, masks as graph inputs), and the
// Transformer encoder and decoder layers, each matching tapegrad's eval outputs (float32, 1e-5 relative); attention
// dropout is refused.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>

#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/tapegrad.h>

#include "support/error_of.h"
#include "support/onnx_runtime.h"

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

std::string temp_model(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / fmt::format("tapegrad_attn_{}_{}.onnx", stem, ::getpid())).string();
}

// Exports `forward` of `module` on `inputs` (named input_0, input_1, ...), runs it in ONNX Runtime and compares
// every output with tapegrad's eval outputs.
void check(nn::Module& module, const onnx::ModuleForward& forward, const std::vector<Tensor>& inputs) {
  const std::string path = temp_model("check");
  onnx::export_onnx(module, forward, inputs, path);
  std::vector<Tensor> expected;
  {
    NoGradGuard no_grad;
    module.eval();
    expected = forward(module, inputs);
  }
  std::vector<NamedTensor> feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    feeds.push_back({inputs.size() == 1 ? std::string("input") : fmt::format("input_{}", i), inputs[i]});
  const std::vector<Tensor> outputs = run_in_onnx_runtime(path, feeds);
  std::filesystem::remove(path);
  REQUIRE(outputs.size() == expected.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    INFO("output " << i);
    CHECK(compare_outputs(expected[i], outputs[i], 1e-5, 1e-6) == "");
  }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention with an additive mask, a keep-mask and is_causal") {
  manual_seed(1);
  nn::Sequential none;  // the op alone: no parameters
  const Tensor q = randn({2, 3, 4, 8}), k = randn({2, 3, 6, 8}), v = randn({2, 3, 6, 5});
  check(none,
        [](nn::Module&, const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], AttentionMask::additive(in[3]))};
        },
        {q, k, v, randn({4, 6})});
  // The keep-mask excludes (i, 0) for every row but keeps at least one key per row.
  Tensor keep = ones({4, 6});
  keep.narrow(1, 0, 1).fill_(0.0);
  check(none,
        [](nn::Module&, const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], AttentionMask::keep(in[3]))};
        },
        {q, k, v, keep});
  check(none,
        [](nn::Module&, const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], AttentionMask(), 0.0, true)};
        },
        {q, k, v});
}

TEST_CASE("MultiheadAttention: self-attention, and cross-attention with kdim/vdim and a key padding mask") {
  manual_seed(2);
  nn::MultiheadAttention self(8, 2);
  check(self, [](nn::Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{m.forward(in[0])}; },
        {randn({5, 3, 8})});
  nn::MultiheadAttention cross(nn::MultiheadAttentionOptions(8, 4).with_kdim(6).with_vdim(3).with_batch_first(true));
  Tensor padding = zeros({2, 7});
  padding.narrow(1, 5, 2).fill_(1.0);  // the last two keys of each sequence are padding
  check(cross,
        [](nn::Module& m, const std::vector<Tensor>& in) {
          auto& attention = dynamic_cast<nn::MultiheadAttention&>(m);
          return std::vector<Tensor>{
              attention.forward_with_weights(in[0], in[1], in[2], nn::masked_out(in[3]), false).attn_output};
        },
        {randn({2, 4, 8}), randn({2, 7, 6}), randn({2, 7, 3}), padding});
}

TEST_CASE("a causal Transformer encoder layer, a two-layer encoder with a final norm, and a decoder layer") {
  manual_seed(3);
  nn::TransformerEncoderLayer encoder(nn::TransformerEncoderLayerOptions(8, 2).with_dim_feedforward(16).with_activation(
      nn::TransformerActivation::GELU));
  check(
      encoder,
      [](nn::Module& m, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{dynamic_cast<nn::TransformerEncoderLayer&>(m).forward(in[0], AttentionMask(in[1]))};
      },
      {randn({5, 2, 8}), nn::generate_square_subsequent_mask(5)});
  nn::TransformerEncoder stack(encoder, 2, std::make_shared<nn::LayerNorm>(Shape{8}));
  check(stack, [](nn::Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{m.forward(in[0])}; },
        {randn({3, 2, 8})});
  nn::TransformerDecoderLayer decoder(
      nn::TransformerDecoderLayerOptions(8, 2).with_dim_feedforward(16).with_norm_first(true));
  check(decoder,
        [](nn::Module& m, const std::vector<Tensor>& in) {
          return std::vector<Tensor>{dynamic_cast<nn::TransformerDecoderLayer&>(m).forward(in[0], in[1])};
        },
        {randn({4, 2, 8}), randn({6, 2, 8})});
}

TEST_CASE("attention dropout in the traced forward is refused, with no file left") {
  manual_seed(4);
  nn::Sequential none;
  const std::string path = temp_model("refused");
  const Tensor q = randn({1, 3, 4});
  CHECK_THAT(
      error_of([&] {
        onnx::export_onnx(
            none,
            [](nn::Module&, const std::vector<Tensor>& in) {
              return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[0], in[0], AttentionMask(), 0.5)};
            },
            {q}, path);
      }),
      Catch::Contains("scaled_dot_product_attention") && Catch::Contains("dropout"));
  CHECK_FALSE(std::filesystem::exists(path));
}
