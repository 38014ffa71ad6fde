#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/layers/multihead_attention.h>

#include <bit>
#include <cmath>
#include <limits>

#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/detail/attention_packed.h>
#include <tapegrad/framework/ops/dropout.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/flip_pad.h>
#include <tapegrad/framework/ops/linalg.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/ops/softmax.h>

namespace tapegrad::nn {

namespace {

constexpr const char* kName = "MultiheadAttention";

// The mask as an additive float tensor of `dtype`: keep-masks become 0 where kept and -inf where excluded.
Tensor additive_mask(const AttentionMask& mask, DType dtype, const char* what) {
  if (mask.kind == AttentionMaskKind::Keep)
    return masked_fill(zeros(mask.values.shape(), TensorOptions{}.with_dtype(dtype)), eq(mask.values, 0.0),
                       -std::numeric_limits<double>::infinity());
  if (!is_floating(mask.values.dtype()))
    fail("{}: an additive {} must be float32 or float64, got {} (use masked_out() or AttentionMask::keep for a "
         "boolean mask)",
         kName, what, dtype_name(mask.values.dtype()));
  return mask.values.dtype() == dtype ? mask.values : mask.values.to(dtype);
}

}  // namespace

AttentionMask masked_out(const Tensor& mask) { return AttentionMask::keep(eq(mask, 0.0)); }

MultiheadAttention::MultiheadAttention(MultiheadAttentionOptions options) : Module(kName), options_(options) {
  const std::int64_t E = options.embed_dim, H = options.num_heads;
  if (E <= 0 || H <= 0)
    fail("{}: embed_dim and num_heads must be greater than zero, got {} and {}", kName, E, H);
  if (E % H != 0) fail("{}: embed_dim must be divisible by num_heads, got embed_dim {} and num_heads {}", kName, E, H);
  if (!(options.dropout >= 0.0 && options.dropout <= 1.0))
    fail("{}: dropout must be a probability in [0, 1], got {}", kName, options.dropout);
  if (options.kdim < 0 || options.vdim < 0)
    fail("{}: kdim and vdim must be non-negative, got {} and {}", kName, options.kdim, options.vdim);
  if (!is_floating(options.dtype)) fail("{}: dtype must be float32 or float64, got {}", kName, dtype_name(options.dtype));
  if (options_.kdim == 0) options_.kdim = E;
  if (options_.vdim == 0) options_.vdim = E;
  const DType dtype = options.dtype;
  if (options_.kdim == E && options_.vdim == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}, dtype));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}, dtype));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, options_.kdim}, dtype));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, options_.vdim}, dtype));
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * E}, dtype));
  if (options.add_bias_kv) {
    bias_k = register_parameter("bias_k", empty({1, 1, E}, dtype));
    bias_v = register_parameter("bias_v", empty({1, 1, E}, dtype));
  }
  Generator& generator = options.generator ? *options.generator : default_generator();
  // Note: PyTorch builds out_proj (drawing its default init) before _reset_parameters draws the rest.
  out_proj = register_module(
      "out_proj", std::make_shared<Linear>(LinearOptions{E, E, options.bias}.with_dtype(dtype).with_generator(generator)));
  const TensorOptions int64 = TensorOptions{}.with_dtype(DType::Int64);
  std::uint64_t seed = 0;
  if (options.dropout_seed) seed = *options.dropout_seed;
  else if (options.dropout > 0.0) seed = default_generator().next_bits();
  options_.dropout_seed = seed;
  mask_seed = register_buffer("mask_seed", zeros({}, int64), false);
  *mask_seed.data<std::int64_t>() = std::bit_cast<std::int64_t>(seed);
  num_masks_drawn = register_buffer("num_masks_drawn", zeros({}, int64), false);
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
  reset_parameters(generator);
}

void MultiheadAttention::reset_parameters(Generator& generator) {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight, 1.0, generator);
  } else {
    init::xavier_uniform_(q_proj_weight, 1.0, generator);
    init::xavier_uniform_(k_proj_weight, 1.0, generator);
    init::xavier_uniform_(v_proj_weight, 1.0, generator);
  }
  if (in_proj_bias.defined()) {
    init::constant_(in_proj_bias, 0.0);
    init::constant_(out_proj->bias, 0.0);
  }
  if (bias_k.defined()) init::xavier_normal_(bias_k, 1.0, generator);
  if (bias_v.defined()) init::xavier_normal_(bias_v, 1.0, generator);
}

Tensor MultiheadAttention::forward(const Tensor& input) {
  return forward_with_weights(input, input, input, AttentionMask(), false).attn_output;
}

MultiheadAttentionResult MultiheadAttention::forward_with_weights(const Tensor& query, const Tensor& key,
                                                                  const Tensor& value,
                                                                  const AttentionMask& key_padding_mask,
                                                                  bool need_weights, const AttentionMask& attn_mask,
                                                                  bool average_attn_weights) {
  query.check_defined(kName);
  key.check_defined(kName);
  value.check_defined(kName);
  const std::int64_t E = options_.embed_dim, H = options_.num_heads, head_dim = E / H;
  const DType dtype = out_proj->weight.dtype();
  const bool batched = query.dim() == 3;
  if (query.dim() != 2 && query.dim() != 3)
    fail("{}: query should be unbatched 2D or batched 3D, got {}", kName, shape_string(query.shape()));
  if (key.dim() != query.dim() || value.dim() != query.dim())
    fail("{}: query, key and value must all be {}D, got query {}, key {}, value {}", kName, query.dim(),
         shape_string(query.shape()), shape_string(key.shape()), shape_string(value.shape()));
  for (const Tensor* t : {&query, &key, &value})
    if (t->dtype() != dtype)
      fail("{}: inputs are {} but the layer's parameters are {} (convert one with .to())", kName,
           dtype_name(t->dtype()), dtype_name(dtype));
  // [L, B, features] from every layout.
  auto canonical = [&](const Tensor& x) {
    if (!batched) return x.unsqueeze(1);
    return options_.batch_first ? x.transpose(0, 1) : x;
  };
  // Note: self-attention's key and value are the query's canonical tensor, not two more (recorded) views of it.
  const Tensor q_in = canonical(query), k_in = key.is_same(query) ? q_in : canonical(key),
               v_in = value.is_same(query) ? q_in : (value.is_same(key) ? k_in : canonical(value));
  const std::int64_t L = q_in.size(0), B = q_in.size(1), S0 = k_in.size(0);
  if (q_in.size(2) != E)
    fail("{}: expected query with {} features (embed_dim), got {}", kName, E, shape_string(query.shape()));
  if (k_in.size(2) != options_.kdim || v_in.size(2) != options_.vdim)
    fail("{}: expected key with {} and value with {} features, got key {} and value {}", kName, options_.kdim,
         options_.vdim, shape_string(key.shape()), shape_string(value.shape()));
  if (k_in.size(1) != B || v_in.size(1) != B || v_in.size(0) != S0)
    fail("{}: key {} and value {} must have the query's batch size {} and the same length", kName,
         shape_string(key.shape()), shape_string(value.shape()), B);

  // Masks, additive, checked against PyTorch's shapes.
  Tensor mask;
  if (attn_mask.values.defined()) {
    mask = additive_mask(attn_mask, dtype, "attn_mask");
    const Shape expected_3d = batched ? Shape{B * H, L, S0} : Shape{H, L, S0};
    if (mask.dim() == 2) {
      if (mask.shape() != Shape{L, S0})
        fail("{}: the shape of the 2D attn_mask is {}, but should be {}", kName, shape_string(mask.shape()),
             shape_string(Shape{L, S0}));
      mask = mask.unsqueeze(0);
    } else if (mask.dim() == 3) {
      if (mask.shape() != expected_3d)
        fail("{}: the shape of the 3D attn_mask is {}, but should be {}", kName, shape_string(mask.shape()),
             shape_string(expected_3d));
    } else {
      fail("{}: attn_mask's dimension {} is not supported (2D [L, S] or 3D [B * num_heads, L, S])", kName, mask.dim());
    }
  }
  Tensor padding;
  if (key_padding_mask.values.defined()) {
    padding = additive_mask(key_padding_mask, dtype, "key_padding_mask");
    const Shape expected = batched ? Shape{B, S0} : Shape{S0};
    if (padding.shape() != expected)
      fail("{}: expected key_padding_mask of shape {}, got {}", kName, shape_string(expected),
           shape_string(padding.shape()));
    if (!batched) padding = padding.unsqueeze(0);
  }

  // The dropout stream of this call (counted below, after the attention drew from it).
  const bool drop = is_training() && options_.dropout > 0.0;
  std::optional<Generator> generator;
  if (drop) {
    const std::int64_t calls = *num_masks_drawn.data<std::int64_t>();
    if (calls < 0) fail("{}: num_masks_drawn is {}: it must be non-negative", kName, calls);
    const auto seed = std::bit_cast<std::uint64_t>(*mask_seed.data<std::int64_t>());
    generator.emplace(tapegrad::detail::splitmix64_finalizer(seed ^ tapegrad::detail::splitmix64_finalizer(static_cast<std::uint64_t>(calls))));
  }
  const double p = drop ? options_.dropout : 0.0;

  // Self-attention in training (query, key and value one tensor): one in_proj GEMM into a packed [L, B, 3E]
  // projection and one op that reads each head where it lies (ops/detail/attention_packed.h): the same values,
  // mask and gradients as the general path below, without its transposed copies of q, k, v, the output and their
  // gradients. Note: training only, so that an inference trace (the ONNX export) sees the general path's ops.
  const bool packed = is_training() && !need_weights && query.is_same(key) && query.is_same(value) &&
                      in_proj_weight.defined() && !bias_k.defined() && !options_.add_zero_attn &&
                      !(mask.defined() && mask.requires_grad()) && !(padding.defined() && padding.requires_grad());
  if (packed) {
    if (padding.defined()) {
      padding = padding.reshape({B, 1, 1, S0}).expand({B, H, 1, S0}).reshape({B * H, 1, S0});
      mask = mask.defined() ? add(mask, padding) : padding;
    }
    const Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    const Tensor attended = tapegrad::detail::packed_self_attention(qkv, H, mask, p, drop ? *generator : default_generator());
    if (drop) ++*num_masks_drawn.data<std::int64_t>();
    MultiheadAttentionResult result;
    result.attn_output = (*out_proj)(attended);
    if (!batched) result.attn_output = result.attn_output.squeeze(1);
    else if (options_.batch_first) result.attn_output = result.attn_output.transpose(0, 1).contiguous();
    return result;
  }

  // Input projections ([L, B, E], [S, B, E], [S, B, E]).
  auto bias_part = [&](std::int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor(); };
  auto weight_part = [&](std::int64_t i) {
    if (in_proj_weight.defined()) return in_proj_weight.narrow(0, i * E, E);
    return i == 0 ? q_proj_weight : (i == 1 ? k_proj_weight : v_proj_weight);
  };
  Tensor q = linear(q_in, weight_part(0), bias_part(0));
  Tensor k = linear(k_in, weight_part(1), bias_part(1));
  Tensor v = linear(v_in, weight_part(2), bias_part(2));
  auto pad_masks = [&] {
    if (mask.defined()) mask = pad(mask, {0, 1});
    if (padding.defined()) padding = pad(padding, {0, 1});
  };
  if (bias_k.defined()) {
    k = cat({k, bias_k.expand({1, B, E})}, 0);
    v = cat({v, bias_v.expand({1, B, E})}, 0);
    pad_masks();
  }
  // [B * H, length, head_dim], heads of one sample adjacent, as PyTorch's view + transpose.
  auto heads = [&](const Tensor& x) { return x.reshape({x.size(0), B * H, head_dim}).transpose(0, 1); };
  q = heads(q);
  k = heads(k);
  v = heads(v);
  if (options_.add_zero_attn) {
    const Tensor zero = zeros({B * H, 1, head_dim}, TensorOptions{}.with_dtype(dtype));
    k = cat({k, zero}, 1);
    v = cat({v, zero}, 1);
    pad_masks();
  }
  const std::int64_t S = k.size(1);
  if (padding.defined()) {
    padding = padding.reshape({B, 1, 1, S}).expand({B, H, 1, S}).reshape({B * H, 1, S});
    mask = mask.defined() ? add(mask, padding) : padding;
  }

  Tensor attended, weights;
  if (need_weights) {
    const Tensor q_scaled = div(q, std::sqrt(static_cast<double>(head_dim)));
    const Tensor kt = k.transpose(1, 2);
    weights = softmax(mask.defined() ? baddbmm(mask, q_scaled, kt) : bmm(q_scaled, kt), -1);
    if (drop) weights = dropout(weights, p, true, *generator);
    attended = bmm(weights, v);
  } else {
    attended = drop ? scaled_dot_product_attention(q, k, v, AttentionMask::additive(mask), p, false, *generator)
                    : scaled_dot_product_attention(q, k, v, AttentionMask::additive(mask));
  }
  if (drop) ++*num_masks_drawn.data<std::int64_t>();

  MultiheadAttentionResult result;
  result.attn_output = (*out_proj)(attended.transpose(0, 1).reshape({L, B, E}));
  if (need_weights) {
    weights = weights.reshape({B, H, L, S});
    if (average_attn_weights) weights = div(sum(weights, {1}), static_cast<double>(H));
    result.attn_weights = batched ? weights : weights.squeeze(0);
  }
  if (!batched) result.attn_output = result.attn_output.squeeze(1);
  // Note: contiguous, as PyTorch's output: a transposed view fed to an elementwise op (the encoder's residual
  // add) would make that op record a copy that nothing keeps alive.
  else if (options_.batch_first) result.attn_output = result.attn_output.transpose(0, 1).contiguous();
  return result;
}

std::string MultiheadAttention::extra_repr() const {
  std::string repr = fmt::format("embed_dim={}, num_heads={}", options_.embed_dim, options_.num_heads);
  if (options_.dropout > 0.0) repr += fmt::format(", dropout={}", options_.dropout);
  if (!options_.bias) repr += ", bias=False";
  if (options_.add_bias_kv) repr += ", add_bias_kv=True";
  if (options_.add_zero_attn) repr += ", add_zero_attn=True";
  if (options_.kdim != options_.embed_dim) repr += fmt::format(", kdim={}", options_.kdim);
  if (options_.vdim != options_.embed_dim) repr += fmt::format(", vdim={}", options_.vdim);
  if (options_.batch_first) repr += ", batch_first=True";
  return repr;
}

std::shared_ptr<Module> MultiheadAttention::clone() const {
  // Note: clone_into overwrites every value, so the fresh layer draws its throwaway init from a local generator.
  Generator scratch;
  MultiheadAttentionOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<MultiheadAttention>(options));
}

}  // namespace tapegrad::nn
