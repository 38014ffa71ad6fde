#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/layers/transformer_encoder.h>

#include <bit>
#include <limits>

#include <tapegrad/framework/ops/activation.h>
#include <tapegrad/framework/ops/detail/dropout_fused.h>
#include <tapegrad/framework/ops/dropout.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/triangular.h>

namespace tapegrad::nn {

namespace {

std::uint64_t seed_of(const Tensor& mask_seed) { return std::bit_cast<std::uint64_t>(*mask_seed.data<std::int64_t>()); }

}  // namespace

// ---- TransformerDropout ----

TransformerDropout::TransformerDropout(double p, std::optional<std::uint64_t> seed) : Module("Dropout"), p_(p) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("Dropout: dropout probability has to be between 0 and 1, but got {}", p);
  const std::uint64_t value = seed ? *seed : (p > 0.0 ? default_generator().next_bits() : 0);
  const TensorOptions int64 = TensorOptions{}.with_dtype(DType::Int64);
  mask_seed = register_buffer("mask_seed", zeros({}, int64), false);
  *mask_seed.data<std::int64_t>() = std::bit_cast<std::int64_t>(value);
  num_masks_drawn = register_buffer("num_masks_drawn", zeros({}, int64), false);
}

Generator TransformerDropout::next_generator() {
  const std::int64_t calls = *num_masks_drawn.data<std::int64_t>();
  if (calls < 0) fail("Dropout: num_masks_drawn is {}: it must be non-negative", calls);
  Generator generator(tapegrad::detail::splitmix64_finalizer(seed_of(mask_seed) ^ tapegrad::detail::splitmix64_finalizer(static_cast<std::uint64_t>(calls))));
  ++*num_masks_drawn.data<std::int64_t>();
  return generator;
}

Tensor TransformerDropout::forward(const Tensor& input) {
  if (!drops()) return input;
  Generator generator = next_generator();
  return dropout(input, p_, true, generator);
}

// Note: the fused ops keep one byte per element for backward where relu + dropout kept relu's input, the
// intermediate and a mask of the input's dtype, and add + dropout the dropped branch and the mask.
Tensor TransformerDropout::forward_relu(const Tensor& input) {
  if (!drops()) return relu(input);
  Generator generator = next_generator();
  return tapegrad::detail::relu_dropout(input, p_, generator);
}

Tensor TransformerDropout::forward_add(const Tensor& residual, const Tensor& input) {
  if (!drops()) return add(residual, input);
  Generator generator = next_generator();
  return tapegrad::detail::add_dropout(residual, input, p_, generator);
}

std::string TransformerDropout::extra_repr() const { return fmt::format("p={}", p_); }

std::shared_ptr<Module> TransformerDropout::clone() const {
  return clone_into(std::make_shared<TransformerDropout>(p_, seed_of(mask_seed)));
}

// ---- TransformerEncoderLayer ----

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerOptions options)
    : Module("TransformerEncoderLayer"), options_(options) {
  const char* name = "TransformerEncoderLayer";
  if (options.d_model <= 0 || options.nhead <= 0)
    fail("{}: d_model and nhead must be greater than zero, got {} and {}", name, options.d_model, options.nhead);
  if (options.d_model % options.nhead != 0)
    fail("{}: d_model must be divisible by nhead, got d_model {} and nhead {}", name, options.d_model, options.nhead);
  if (options.dim_feedforward <= 0)
    fail("{}: dim_feedforward must be greater than zero, got {}", name, options.dim_feedforward);
  Generator& generator = options.generator ? *options.generator : default_generator();
  const DType dtype = options.dtype;
  const std::int64_t d = options.d_model, ff = options.dim_feedforward;
  // Note: with a dropout_seed each stream gets its own seed mixed from it; otherwise each draws one, in order.
  auto seed = [&](std::uint64_t k) -> std::optional<std::uint64_t> {
    if (!options.dropout_seed) return std::nullopt;
    return tapegrad::detail::splitmix64_finalizer(*options.dropout_seed ^ tapegrad::detail::splitmix64_finalizer(k));
  };
  auto attention = MultiheadAttentionOptions(d, options.nhead)
                       .with_dropout(options.dropout)
                       .with_batch_first(options.batch_first)
                       .with_dtype(dtype)
                       .with_generator(generator);
  if (const auto s = seed(0)) attention.with_dropout_seed(*s);
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(attention));
  linear1 = register_module("linear1",
                            std::make_shared<Linear>(LinearOptions{d, ff}.with_dtype(dtype).with_generator(generator)));
  dropout = register_module("dropout", std::make_shared<TransformerDropout>(options.dropout, seed(1)));
  linear2 = register_module("linear2",
                            std::make_shared<Linear>(LinearOptions{ff, d}.with_dtype(dtype).with_generator(generator)));
  const auto norm = LayerNormOptions{{d}}.with_eps(options.layer_norm_eps).with_dtype(dtype);
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(norm));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(norm));
  dropout1 = register_module("dropout1", std::make_shared<TransformerDropout>(options.dropout, seed(2)));
  dropout2 = register_module("dropout2", std::make_shared<TransformerDropout>(options.dropout, seed(3)));
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  const Tensor hidden = (*linear1)(x);
  const Tensor dropped = options_.activation == TransformerActivation::GELU ? (*dropout)(gelu(hidden))
                                                                           : dropout->forward_relu(hidden);
  return (*linear2)(dropped);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, AttentionMask(), AttentionMask()); }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMask& src_mask,
                                        const AttentionMask& src_key_padding_mask) {
  src.check_defined("TransformerEncoderLayer");
  if ((src.dim() != 2 && src.dim() != 3) || src.size(-1) != options_.d_model)
    fail("TransformerEncoderLayer: expected src [L, B, {0}] ([B, L, {0}] batch_first, or unbatched [L, {0}]), got {1}",
         options_.d_model, shape_string(src.shape()));
  // Note: each residual sum takes its branch's dropout in one fused op (dropout1, dropout2: forward_add).
  auto attention = [&](const Tensor& x) {
    return self_attn->forward_with_weights(x, x, x, src_key_padding_mask, false, src_mask).attn_output;
  };
  if (options_.norm_first) {
    const Tensor x = dropout1->forward_add(src, attention((*norm1)(src)));
    return dropout2->forward_add(x, feed_forward((*norm2)(x)));
  }
  const Tensor x = (*norm1)(dropout1->forward_add(src, attention(src)));
  return (*norm2)(dropout2->forward_add(x, feed_forward(x)));
}

std::string TransformerEncoderLayer::extra_repr() const {
  return fmt::format("d_model={}, nhead={}, dim_feedforward={}, dropout={}, activation={}, norm_first={}",
                     options_.d_model, options_.nhead, options_.dim_feedforward, options_.dropout,
                     options_.activation == TransformerActivation::GELU ? "gelu" : "relu", options_.norm_first);
}

std::shared_ptr<Module> TransformerEncoderLayer::clone() const {
  // Note: clone_into overwrites every value (the dropout seeds included), so the fresh layer draws its
  // throwaway init from a local generator and its seeds from a fixed one.
  Generator scratch;
  TransformerEncoderLayerOptions options = options_;
  options.generator = &scratch;
  options.dropout_seed = 0;
  return clone_into(std::make_shared<TransformerEncoderLayer>(options));
}

// ---- TransformerEncoder ----

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, std::int64_t num_layers,
                                       std::shared_ptr<LayerNorm> final_norm)
    : Module("TransformerEncoder") {
  if (num_layers <= 0) fail("TransformerEncoder: num_layers must be greater than zero, got {}", num_layers);
  layers = register_module("layers", std::make_shared<Sequential>());
  for (std::int64_t i = 0; i < num_layers; ++i) {
    std::shared_ptr<Module> copy = encoder_layer.clone();
    if (i > 0)
      for (auto& [name, buffer] : copy->named_buffers())
        if (name.ends_with("mask_seed"))
          *buffer.data<std::int64_t>() =
              std::bit_cast<std::int64_t>(tapegrad::detail::splitmix64_finalizer(seed_of(buffer) ^ tapegrad::detail::splitmix64_finalizer(static_cast<std::uint64_t>(i))));
    layers->push_back(copy);
  }
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoder::layer(std::int64_t index) const {
  return layers->at_as<TransformerEncoderLayer>(static_cast<std::size_t>(index));
}

Tensor TransformerEncoder::forward(const Tensor& src) { return forward(src, AttentionMask(), AttentionMask()); }

Tensor TransformerEncoder::forward(const Tensor& src, const AttentionMask& mask,
                                   const AttentionMask& src_key_padding_mask) {
  Tensor output = src;
  for (std::int64_t i = 0; i < num_layers(); ++i) output = layer(i)->forward(output, mask, src_key_padding_mask);
  return norm ? (*norm)(output) : output;
}

std::shared_ptr<Module> TransformerEncoder::clone() const {
  const auto fresh_norm = norm ? std::dynamic_pointer_cast<LayerNorm>(norm->clone()) : nullptr;
  return clone_into(std::make_shared<TransformerEncoder>(*layer(0), num_layers(), fresh_norm));
}

Tensor generate_square_subsequent_mask(std::int64_t sz, DType dtype) {
  if (sz < 0) fail("generate_square_subsequent_mask: sz must be non-negative, got {}", sz);
  return triu(full({sz, sz}, -std::numeric_limits<double>::infinity(), TensorOptions{}.with_dtype(dtype)), 1);
}

}  // namespace tapegrad::nn
