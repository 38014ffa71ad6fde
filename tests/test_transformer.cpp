// nn::TransformerEncoderLayer and nn::TransformerEncoder against PyTorch 1.13's numbers in
// tests/data/attention_layers_reference.txt (tests/reference/make_attention_layers_reference.py): outputs and
// the gradients of the input and every parameter, loaded by PyTorch's state_dict names (strict), in float64
// (1e-10) and float32; the same for TransformerDecoderLayer, TransformerDecoder and Transformer; the testing
// kit's gradient and buffer checks; the causal mask; copies; errors.
#include <set>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/layers/transformer_decoder.h>
#include <tapegrad/layers/transformer_encoder.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::reference_entry;

namespace {

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref =
      tapegrad::testing::load_reference_file("attention_layers_reference.txt");
  return ref;
}

const Tensor& at(const std::string& key) { return reference_entry(reference(), key); }
std::int64_t integer(const std::string& key) { return static_cast<std::int64_t>(at(key).item()); }

std::set<std::string> cases() {
  std::set<std::string> out;
  for (const auto& [key, value] : reference())
    if (key.starts_with("enc_") && key.ends_with("/d_model")) out.insert(key.substr(0, key.size() - 8));
  return out;
}

nn::TransformerEncoderLayerOptions layer_options(const std::string& name) {
  return nn::TransformerEncoderLayerOptions(integer(name + "/d_model"), integer(name + "/nhead"))
      .with_dim_feedforward(integer(name + "/dim_feedforward"))
      .with_dropout(0.0)
      .with_activation(integer(name + "/gelu") != 0 ? nn::TransformerActivation::GELU : nn::TransformerActivation::ReLU)
      .with_layer_norm_eps(at(name + "/eps").item())
      .with_batch_first(integer(name + "/batch_first") != 0)
      .with_norm_first(integer(name + "/norm_first") != 0)
      .with_dtype(DType::Float64);
}

std::shared_ptr<nn::Module> make_module(const std::string& name) {
  const nn::TransformerEncoderLayer layer(layer_options(name));
  std::shared_ptr<nn::Module> m;
  const std::int64_t num_layers = integer(name + "/num_layers");
  if (num_layers == 0) {
    m = layer.clone();
  } else {
    auto norm = integer(name + "/final_norm") != 0
                    ? std::make_shared<nn::LayerNorm>(nn::LayerNormOptions{{integer(name + "/d_model")}}
                                                          .with_eps(at(name + "/eps").item())
                                                          .with_dtype(DType::Float64))
                    : nullptr;
    m = std::make_shared<nn::TransformerEncoder>(layer, num_layers, norm);
  }
  nn::NamedTensors state;
  const std::string prefix = name + "/param/";
  for (const auto& [key, value] : reference())
    if (key.starts_with(prefix)) state.emplace_back(key.substr(prefix.size()), value);
  m->load_state(state);  // strict
  return m;
}

AttentionMask mask_of(const std::string& key, std::int64_t kind, bool is_bool, DType dtype) {
  if (kind == 0) return AttentionMask();
  const Tensor values = at(key).to(dtype);
  return is_bool ? nn::masked_out(values) : AttentionMask(values);
}

void check_case(const std::string& name, DType dtype, double rtol, double atol) {
  INFO(name << " in " << dtype_name(dtype));
  auto m = make_module(name);
  m->to(dtype);
  const Tensor src = at(name + "/src").to(dtype).clone().requires_grad_(true);
  const std::int64_t mask_kind = integer(name + "/src_mask"), padding_kind = integer(name + "/key_padding_mask");
  const AttentionMask mask = mask_of(name + "/attn_mask_values", mask_kind, mask_kind == 1 || mask_kind == 3, dtype);
  const AttentionMask padding = mask_of(name + "/key_padding_mask_values", padding_kind, padding_kind == 1, dtype);
  const Tensor out = integer(name + "/num_layers") == 0
                         ? dynamic_cast<nn::TransformerEncoderLayer&>(*m).forward(src, mask, padding)
                         : dynamic_cast<nn::TransformerEncoder&>(*m).forward(src, mask, padding);
  CHECK(allclose(out.to(DType::Float64), at(name + "/output"), rtol, atol));
  sum(mul(out, at(name + "/w_output").to(dtype))).backward();
  CHECK(allclose(src.grad().to(DType::Float64), at(name + "/grad_src"), rtol, atol));
  std::size_t checked = 0;
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(allclose(p.grad().to(DType::Float64), at(name + "/grad/" + pname), rtol, atol));
    ++checked;
  }
  CHECK(checked == m->state().size());  // every PyTorch entry is a parameter
}

}  // namespace

TEST_CASE("TransformerEncoderLayer and TransformerEncoder match PyTorch's outputs and gradients in float64") {
  const std::set<std::string> names = cases();
  REQUIRE(names.size() == 7);
  for (const std::string& name : names) check_case(name, DType::Float64, 1e-10, 1e-12);
}

TEST_CASE("TransformerEncoderLayer and TransformerEncoder match PyTorch within float32 tolerance") {
  // Note: torch.testing.assert_close's float32 defaults are rtol 1.3e-6, atol 1e-5.
  for (const std::string& name : cases()) check_case(name, DType::Float32, 1.3e-6, 1e-5);
}

TEST_CASE("generate_square_subsequent_mask is PyTorch's causal mask") {
  const Tensor mask = nn::generate_square_subsequent_mask(4, DType::Float64);
  const std::vector<double> got = mask.to_vector(), expected = at("square_subsequent_mask_4").to_vector();
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == expected[i]);  // exact: 0 and -inf
  CHECK(nn::generate_square_subsequent_mask(3).dtype() == DType::Float32);
}

TEST_CASE("the encoder's layers start as copies of the given layer, with their own dropout streams") {
  const nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(4, 2).with_dim_feedforward(8));
  nn::TransformerEncoder encoder(layer, 3, std::make_shared<nn::LayerNorm>(Shape{4}));
  std::vector<std::string> names;
  for (const auto& [name, t] : encoder.state()) names.push_back(name);
  CHECK(names.size() == 3 * 12 + 2);
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(names.back() == "norm.bias");
  for (std::int64_t i = 0; i < 3; ++i) {
    CHECK(allclose(encoder.layer(i)->linear1->weight, layer.linear1->weight, 0.0, 0.0));
    CHECK(encoder.layer(i)->linear1->weight.data<float>() != layer.linear1->weight.data<float>());  // a copy
  }
  CHECK(encoder.layer(1)->dropout->mask_seed.item() != encoder.layer(2)->dropout->mask_seed.item());
  // Training mode: the layers drop different positions; eval mode is deterministic.
  const Tensor x = randn({5, 2, 4});
  CHECK_FALSE(allclose(encoder(x), encoder(x), 0.0, 0.0));
  encoder.eval();
  CHECK(allclose(encoder(x), encoder(x), 0.0, 0.0));
}

TEST_CASE("the testing kit's gradient and buffer checks pass for the encoder layer") {
  auto shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make_layer = [shape] {
    const std::int64_t heads = *rc::gen::inRange<std::int64_t>(1, 3), d = heads * *rc::gen::inRange<std::int64_t>(1, 3);
    const std::int64_t L = *rc::gen::inRange<std::int64_t>(1, 4), B = *rc::gen::inRange<std::int64_t>(1, 3);
    const bool batch_first = *rc::gen::arbitrary<bool>();
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    auto layer = std::make_shared<nn::TransformerEncoderLayer>(
        nn::TransformerEncoderLayerOptions(d, heads)
            .with_dim_feedforward(*rc::gen::inRange<std::int64_t>(1, 5))
            .with_activation(*rc::gen::arbitrary<bool>() ? nn::TransformerActivation::GELU
                                                         : nn::TransformerActivation::ReLU)
            .with_norm_first(*rc::gen::arbitrary<bool>())
            .with_batch_first(batch_first)
            .with_dropout(*rc::gen::element(0.0, 0.3))
            .with_dropout_seed(5)
            .with_dtype(DType::Float64)
            .with_generator(g));
    *shape = *rc::gen::inRange(0, 4) == 0 ? Shape{L, d} : (batch_first ? Shape{B, L, d} : Shape{L, B, d});
    return std::shared_ptr<nn::Module>(layer);
  };
  const auto inputs = rc::gen::exec([shape] { return *gen::tensor_of_shape(*shape); });
  tapegrad::testing::check_module_gradients(make_layer, inputs, {.label = "encoder layer"});
  tapegrad::testing::check_buffer_invariance(make_layer, inputs,
                                             {// The dropout streams' position, a statistic only when the layer
                                              // draws masks (dropout > 0): with p = 0 it rightly never moves.
                                              .statistics_of =
                                                  [](const nn::Module& m) {
                                                    const auto& layer =
                                                        dynamic_cast<const nn::TransformerEncoderLayer&>(m);
                                                    return layer.options().dropout > 0
                                                               ? std::vector<std::string>{"num_masks_drawn"}
                                                               : std::vector<std::string>{};
                                                  },
                                              .non_persistent = {"mask_seed", "num_masks_drawn"},
                                              .label = "encoder layer"});
}

TEST_CASE("the encoder layers report bad options and shapes") {
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(6, 4),
                    "TransformerEncoderLayer: d_model must be divisible by nhead, got d_model 6 and nhead 4");
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(4, 2).with_dim_feedforward(8));
  CHECK_THROWS_WITH(layer(randn({3, 2, 5})),
                    "TransformerEncoderLayer: expected src [L, B, 4] ([B, L, 4] batch_first, or unbatched [L, 4]), "
                    "got [3, 2, 5]");
  CHECK_THROWS_WITH(layer.forward(randn({3, 2, 4}), nn::generate_square_subsequent_mask(4)),
                    "MultiheadAttention: the shape of the 2D attn_mask is [4, 4], but should be [3, 3]");
  CHECK_THROWS_WITH(nn::TransformerEncoder(layer, 0), "TransformerEncoder: num_layers must be greater than zero, got 0");
}


namespace {

std::set<std::string> decoder_cases() {
  std::set<std::string> out;
  for (const auto& [key, value] : reference())
    if ((key.starts_with("dec_") || key.starts_with("transformer")) && key.ends_with("/d_model"))
      out.insert(key.substr(0, key.size() - 8));
  return out;
}

std::shared_ptr<nn::Module> make_decoder(const std::string& name) {
  const auto options = layer_options(name);
  const std::int64_t num_layers = integer(name + "/num_layers");
  std::shared_ptr<nn::Module> m;
  if (integer(name + "/transformer") != 0) {
    m = std::make_shared<nn::Transformer>(nn::TransformerOptions{}
                                              .with_d_model(options.d_model)
                                              .with_nhead(options.nhead)
                                              .with_num_encoder_layers(num_layers)
                                              .with_num_decoder_layers(num_layers)
                                              .with_dim_feedforward(options.dim_feedforward)
                                              .with_dropout(0.0)
                                              .with_activation(options.activation)
                                              .with_layer_norm_eps(options.layer_norm_eps)
                                              .with_batch_first(options.batch_first)
                                              .with_norm_first(options.norm_first)
                                              .with_dtype(DType::Float64));
  } else if (num_layers == 0) {
    m = std::make_shared<nn::TransformerDecoderLayer>(options);
  } else {
    auto norm = integer(name + "/final_norm") != 0
                    ? std::make_shared<nn::LayerNorm>(
                          nn::LayerNormOptions{{options.d_model}}.with_eps(options.layer_norm_eps).with_dtype(DType::Float64))
                    : nullptr;
    m = std::make_shared<nn::TransformerDecoder>(nn::TransformerDecoderLayer(options), num_layers, norm);
  }
  nn::NamedTensors state;
  const std::string prefix = name + "/param/";
  for (const auto& [key, value] : reference())
    if (key.starts_with(prefix)) state.emplace_back(key.substr(prefix.size()), value);
  m->load_state(state);  // strict
  return m;
}

void check_decoder_case(const std::string& name, DType dtype, double rtol, double atol) {
  INFO(name << " in " << dtype_name(dtype));
  auto m = make_decoder(name);
  m->to(dtype);
  const Tensor tgt = at(name + "/tgt").to(dtype).clone().requires_grad_(true);
  const Tensor memory = at(name + "/memory").to(dtype).clone().requires_grad_(true);
  auto mask = [&](const std::string& field, bool attention) {
    const std::int64_t kind = integer(name + "/" + field);
    const bool is_bool = attention ? (kind == 1 || kind == 3) : kind == 1;
    return mask_of(name + "/" + field + "_values", kind, is_bool, dtype);
  };
  const nn::TransformerDecoderMasks masks{mask("tgt_mask", true), mask("memory_mask", true),
                                          mask("tgt_key_padding_mask", false), mask("memory_key_padding_mask", false)};
  Tensor out;
  if (auto* transformer = dynamic_cast<nn::Transformer*>(m.get())) out = transformer->forward(memory, tgt, {}, masks);
  else if (auto* stack = dynamic_cast<nn::TransformerDecoder*>(m.get())) out = stack->forward(tgt, memory, masks);
  else out = dynamic_cast<nn::TransformerDecoderLayer&>(*m).forward(tgt, memory, masks);
  CHECK(allclose(out.to(DType::Float64), at(name + "/output"), rtol, atol));
  sum(mul(out, at(name + "/w_output").to(dtype))).backward();
  CHECK(allclose(tgt.grad().to(DType::Float64), at(name + "/grad_tgt"), rtol, atol));
  CHECK(allclose(memory.grad().to(DType::Float64), at(name + "/grad_memory"), rtol, atol));
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(allclose(p.grad().to(DType::Float64), at(name + "/grad/" + pname), rtol, atol));
  }
}

}  // namespace

TEST_CASE("TransformerDecoderLayer, TransformerDecoder and Transformer match PyTorch in float64 and float32") {
  const std::set<std::string> names = decoder_cases();
  REQUIRE(names.size() == 6);
  for (const std::string& name : names) check_decoder_case(name, DType::Float64, 1e-10, 1e-12);
  for (const std::string& name : names) check_decoder_case(name, DType::Float32, 1.3e-6, 1e-5);
}

TEST_CASE("Transformer's state_dict names are PyTorch's and its matrices are xavier-initialised") {
  nn::Transformer transformer(nn::TransformerOptions{}.with_d_model(4).with_nhead(2).with_num_encoder_layers(1)
                                  .with_num_decoder_layers(1).with_dim_feedforward(8));
  const nn::NamedTensors state = transformer.state();
  CHECK(state.size() == 12 + 2 + 18 + 2);
  CHECK(state.front().first == "encoder.layers.0.self_attn.in_proj_weight");
  auto parameter = [&](const std::string& name) {
    for (const auto& [n, p] : transformer.named_parameters())
      if (n == name) return p;
    FAIL("no parameter " << name);
    return Tensor();
  };
  CHECK(parameter("decoder.layers.0.multihead_attn.out_proj.weight").shape() == Shape{4, 4});
  CHECK(max(abs(parameter("decoder.layers.0.linear1.weight"))).item() <= std::sqrt(6.0 / 12.0));
  CHECK_THROWS_WITH(transformer.forward(randn({3, 2, 4}), randn({3, 1, 4})),
                    "Transformer: the batch number of src and tgt must be equal, got src [3, 2, 4] and tgt [3, 1, 4]");
  CHECK_THROWS_WITH(nn::TransformerDecoderLayer(6, 4),
                    "TransformerDecoderLayer: d_model must be divisible by nhead, got d_model 6 and nhead 4");
}
