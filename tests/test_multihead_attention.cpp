// nn::MultiheadAttention against PyTorch 1.13's numbers in tests/data/attention_layers_reference.txt (written by
// tests/reference/make_attention_layers_reference.py): outputs, attention weights and the gradients of the inputs
// and every parameter, in float64 (1e-10) and float32; a float64 gradcheck property over random options; names,
// initialisation, dropout and errors.
#include <set>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/layers/multihead_attention.h>
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
    if (key.starts_with("mha_") && key.ends_with("/embed_dim")) out.insert(key.substr(0, key.size() - 10));
  return out;
}

// Boolean masks are stored as 0/1 with PyTorch MHA's convention (1 = not allowed); kinds 2, 4, 5 are float.
AttentionMask mask_of(const std::string& key, std::int64_t kind, bool is_bool, DType dtype) {
  if (kind == 0) return AttentionMask();
  const Tensor values = at(key).to(dtype);
  return is_bool ? nn::masked_out(values) : AttentionMask(values);
}

std::shared_ptr<nn::MultiheadAttention> make_module(const std::string& name) {
  auto m = std::make_shared<nn::MultiheadAttention>(
      nn::MultiheadAttentionOptions(integer(name + "/embed_dim"), integer(name + "/num_heads"))
          .with_bias(integer(name + "/bias") != 0)
          .with_add_bias_kv(integer(name + "/add_bias_kv") != 0)
          .with_add_zero_attn(integer(name + "/add_zero_attn") != 0)
          .with_kdim(integer(name + "/kdim"))
          .with_vdim(integer(name + "/vdim"))
          .with_batch_first(integer(name + "/batch_first") != 0)
          .with_dtype(DType::Float64));
  nn::NamedTensors state;
  const std::string prefix = name + "/param/";
  for (const auto& [key, value] : reference())
    if (key.starts_with(prefix)) state.emplace_back(key.substr(prefix.size()), value);
  m->load_state(state);  // strict
  return m;
}

void check_case(const std::string& name, DType dtype, double rtol, double atol) {
  INFO(name << " in " << dtype_name(dtype));
  auto m = make_module(name);
  m->to(dtype);
  const bool self = integer(name + "/self_attention") != 0;
  const Tensor query = at(name + "/query").to(dtype).clone().requires_grad_(true);
  const Tensor key = self ? query : at(name + "/key").to(dtype).clone().requires_grad_(true);
  const Tensor value = self ? query : at(name + "/value").to(dtype).clone().requires_grad_(true);
  const std::int64_t attn_kind = integer(name + "/attn_mask"), padding_kind = integer(name + "/key_padding_mask");
  const AttentionMask attn_mask =
      mask_of(name + "/attn_mask_values", attn_kind, attn_kind == 1 || attn_kind == 3, dtype);
  const AttentionMask padding = mask_of(name + "/key_padding_mask_values", padding_kind, padding_kind == 1, dtype);
  const bool need_weights = integer(name + "/need_weights") != 0;
  const nn::MultiheadAttentionResult r = m->forward_with_weights(query, key, value, padding, need_weights, attn_mask,
                                                                 integer(name + "/average") != 0);
  CHECK(allclose(r.attn_output.to(DType::Float64), at(name + "/output"), rtol, atol));
  CHECK(r.attn_weights.defined() == need_weights);
  Tensor loss = sum(mul(r.attn_output, at(name + "/w_output").to(dtype)));
  if (need_weights) {
    CHECK(allclose(r.attn_weights.to(DType::Float64), at(name + "/weights"), rtol, atol));
    loss = add(loss, sum(mul(r.attn_weights, at(name + "/w_weights").to(dtype))));
  }
  loss.backward();
  CHECK(allclose(query.grad().to(DType::Float64), at(name + "/grad_query"), rtol, atol));
  if (!self) {
    CHECK(allclose(key.grad().to(DType::Float64), at(name + "/grad_key"), rtol, atol));
    CHECK(allclose(value.grad().to(DType::Float64), at(name + "/grad_value"), rtol, atol));
  }
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(allclose(p.grad().to(DType::Float64), at(name + "/grad/" + pname), rtol, atol));
  }
}

}  // namespace

TEST_CASE("MultiheadAttention matches PyTorch's outputs, weights and gradients in float64") {
  const std::set<std::string> names = cases();
  REQUIRE(names.size() == 24);
  for (const std::string& name : names) check_case(name, DType::Float64, 1e-10, 1e-12);
}

TEST_CASE("MultiheadAttention matches PyTorch within float32 tolerance") {
  // Note: torch.testing.assert_close's float32 defaults are rtol 1.3e-6, atol 1e-5.
  for (const std::string& name : cases()) check_case(name, DType::Float32, 1.3e-6, 1e-5);
}

TEST_CASE("MultiheadAttention's state_dict names, shapes and initialisation are PyTorch's") {
  nn::MultiheadAttention packed(nn::MultiheadAttentionOptions(8, 2).with_add_bias_kv(true));
  std::vector<std::string> names;
  for (const auto& [name, t] : packed.state()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                          "out_proj.bias"});
  CHECK(packed.in_proj_weight.shape() == Shape{24, 8});
  CHECK(packed.bias_k.shape() == Shape{1, 1, 8});
  CHECK(max(abs(packed.in_proj_bias)).item() == 0.0);
  CHECK(max(abs(packed.out_proj->bias)).item() == 0.0);
  const double xavier_bound = std::sqrt(6.0 / (8.0 + 24.0));
  CHECK(max(abs(packed.in_proj_weight)).item() <= xavier_bound);
  CHECK(max(abs(packed.in_proj_weight)).item() > 0.5 * xavier_bound);

  nn::MultiheadAttention separate(nn::MultiheadAttentionOptions(6, 3).with_kdim(4).with_vdim(5).with_bias(false));
  names.clear();
  for (const auto& [name, t] : separate.state()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});
  CHECK(separate.k_proj_weight.shape() == Shape{6, 4});
  CHECK(separate.v_proj_weight.shape() == Shape{6, 5});
  CHECK(separate.extra_repr().find("embed_dim=6, num_heads=3, bias=False, kdim=4, vdim=5") !=
        std::string::npos);
  // The dropout stream is not state: a PyTorch state_dict loads strictly.
  CHECK(separate.buffers().size() == 2);
  CHECK(separate.state().size() == 4);
}

TEST_CASE("MultiheadAttention's gradients match finite differences over random options") {
  rc::prop("gradcheck of query, key, value and every parameter", [] {
    const std::int64_t H = *rc::gen::inRange<std::int64_t>(1, 3), E = H * *rc::gen::inRange<std::int64_t>(1, 3);
    const std::int64_t L = *rc::gen::inRange<std::int64_t>(1, 4), S = *rc::gen::inRange<std::int64_t>(1, 4),
                       B = *rc::gen::inRange<std::int64_t>(1, 3);
    const bool separate = *rc::gen::arbitrary<bool>(), batch_first = *rc::gen::arbitrary<bool>(),
               unbatched = *rc::gen::inRange(0, 4) == 0, need_weights = *rc::gen::arbitrary<bool>(),
               average = *rc::gen::arbitrary<bool>(), with_mask = *rc::gen::arbitrary<bool>();
    const std::int64_t kdim = separate ? *rc::gen::inRange<std::int64_t>(1, 4) : E,
                       vdim = separate ? *rc::gen::inRange<std::int64_t>(1, 4) : E;
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    auto m = std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(E, H).with_kdim(kdim).with_vdim(vdim).with_batch_first(batch_first)
            .with_bias(*rc::gen::arbitrary<bool>()).with_add_bias_kv(*rc::gen::arbitrary<bool>())
            .with_add_zero_attn(*rc::gen::arbitrary<bool>()).with_dtype(DType::Float64).with_generator(g));
    auto shape = [&](std::int64_t length, std::int64_t features) {
      if (unbatched) return Shape{length, features};
      return batch_first ? Shape{B, length, features} : Shape{length, B, features};
    };
    std::vector<Tensor> inputs = {*gen::tensor_of_shape(shape(L, E)), *gen::tensor_of_shape(shape(S, kdim)),
                                  *gen::tensor_of_shape(shape(S, vdim))};
    const Tensor mask = with_mask ? *gen::tensor_of_shape({L, S}) : Tensor();
    const std::vector<std::string> names = [&] {
      std::vector<std::string> out;
      for (const auto& [name, p] : m->named_parameters()) out.push_back(name);
      return out;
    }();
    for (const auto& [name, p] : m->named_parameters()) inputs.push_back(p.detach());
    const TensorFunction f = [=](const std::vector<Tensor>& v) {
      // Note: the parameters enter as the function's arguments, by replacing the layer's tensors.
      for (std::size_t i = 0; i < names.size(); ++i) {
        Tensor& slot = names[i] == "in_proj_weight" ? m->in_proj_weight
                       : names[i] == "q_proj_weight" ? m->q_proj_weight
                       : names[i] == "k_proj_weight" ? m->k_proj_weight
                       : names[i] == "v_proj_weight" ? m->v_proj_weight
                       : names[i] == "in_proj_bias"  ? m->in_proj_bias
                       : names[i] == "bias_k"        ? m->bias_k
                       : names[i] == "bias_v"        ? m->bias_v
                       : names[i] == "out_proj.weight" ? m->out_proj->weight
                                                       : m->out_proj->bias;
        slot = v[3 + i];
      }
      const auto r = m->forward_with_weights(v[0], v[1], v[2], AttentionMask(), need_weights,
                                             mask.defined() ? AttentionMask(mask) : AttentionMask(), average);
      const Tensor out = r.attn_output.reshape({r.attn_output.numel()});
      return need_weights ? cat({out, r.attn_weights.reshape({r.attn_weights.numel()})}, 0) : out;
    };
    TAPEGRAD_RC_GRADCHECK(f, inputs);
  });
}

TEST_CASE("MultiheadAttention's dropout drops attention weights in training only, from its own stream") {
  nn::MultiheadAttention m(nn::MultiheadAttentionOptions(4, 2).with_dropout(0.5).with_dropout_seed(11));
  const Tensor x = randn({3, 2, 4});
  const auto first = m.forward_with_weights(x, x, x);
  const auto second = m.forward_with_weights(x, x, x);
  CHECK(m.num_masks_drawn.item() == 2);
  CHECK_FALSE(allclose(first.attn_weights, second.attn_weights, 0.0, 0.0));
  // Some weights are dropped (zero), the kept ones are scaled by 2.
  CHECK(min(first.attn_weights).item() == 0.0);
  m.eval();
  const auto evaluated = m.forward_with_weights(x, x, x, {}, true, {}, false);
  CHECK(allclose(sum(evaluated.attn_weights, {-1}), ones({2, 2, 3}), 1e-6, 1e-6));
  CHECK(m.num_masks_drawn.item() == 2);
  // The same stream position gives the same masks (need_weights false goes through scaled_dot_product_attention).
  m.train();
  auto replay = std::dynamic_pointer_cast<nn::MultiheadAttention>(m.clone());
  replay->num_masks_drawn.fill_(0.0);
  CHECK(allclose(replay->forward_with_weights(x, x, x).attn_output, first.attn_output, 0.0, 0.0));
}

TEST_CASE("MultiheadAttention reports bad options and shapes") {
  CHECK_THROWS_WITH(nn::MultiheadAttention(6, 4),
                    "MultiheadAttention: embed_dim must be divisible by num_heads, got embed_dim 6 and num_heads 4");
  nn::MultiheadAttention m(4, 2);
  const Tensor x = randn({3, 2, 4});
  CHECK_THROWS_WITH(m.forward_with_weights(x, x, x, {}, true, AttentionMask(zeros({3, 4}))),
                    "MultiheadAttention: the shape of the 2D attn_mask is [3, 4], but should be [3, 3]");
  CHECK_THROWS_WITH(m.forward_with_weights(x, x, x, {}, true, AttentionMask(zeros({2, 3, 3}))),
                    "MultiheadAttention: the shape of the 3D attn_mask is [2, 3, 3], but should be [4, 3, 3]");
  CHECK_THROWS_WITH(m.forward_with_weights(x, x, x, nn::masked_out(zeros({3, 3}))),
                    "MultiheadAttention: expected key_padding_mask of shape [2, 3], got [3, 3]");
  CHECK_THROWS_WITH(m.forward_with_weights(x, x, x, AttentionMask(zeros({2, 3}, TensorOptions{}.with_dtype(DType::Int64)))),
                    Catch::Contains("an additive key_padding_mask must be float32 or float64"));
  CHECK_THROWS_WITH(m(randn({3, 2, 5})),
                    "MultiheadAttention: expected query with 4 features (embed_dim), got [3, 2, 5]");
  CHECK_THROWS_WITH(m.forward_with_weights(x, randn({3, 4}), randn({3, 4})),
                    Catch::Contains("query, key and value must all be 3D"));
}
