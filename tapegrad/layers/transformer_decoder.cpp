#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/layers/transformer_decoder.h>

#include <bit>

#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/activation.h>
#include <tapegrad/framework/ops/elementwise.h>

namespace tapegrad::nn {

namespace {

// Copy i of a layer for a stack: the same values, the dropout seeds mixed with i (as TransformerEncoder).
std::shared_ptr<Module> stack_copy(const Module& layer, std::int64_t i) {
  std::shared_ptr<Module> copy = layer.clone();
  if (i > 0)
    for (auto& [name, buffer] : copy->named_buffers())
      if (name.ends_with("mask_seed")) {
        const auto seed = std::bit_cast<std::uint64_t>(*buffer.data<std::int64_t>());
        *buffer.data<std::int64_t>() = std::bit_cast<std::int64_t>(tapegrad::detail::splitmix64_finalizer(seed ^ tapegrad::detail::splitmix64_finalizer(static_cast<std::uint64_t>(i))));
      }
  return copy;
}

}  // namespace

// ---- TransformerDecoderLayer ----

TransformerDecoderLayer::TransformerDecoderLayer(TransformerDecoderLayerOptions options)
    : Module("TransformerDecoderLayer"), options_(options) {
  const char* name = "TransformerDecoderLayer";
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
  auto attention = [&](std::uint64_t k) {
    auto o = MultiheadAttentionOptions(d, options.nhead)
                 .with_dropout(options.dropout)
                 .with_batch_first(options.batch_first)
                 .with_dtype(dtype)
                 .with_generator(generator);
    if (const auto s = seed(k)) o.with_dropout_seed(*s);
    return std::make_shared<MultiheadAttention>(o);
  };
  self_attn = register_module("self_attn", attention(0));
  multihead_attn = register_module("multihead_attn", attention(4));
  linear1 = register_module("linear1",
                            std::make_shared<Linear>(LinearOptions{d, ff}.with_dtype(dtype).with_generator(generator)));
  dropout = register_module("dropout", std::make_shared<TransformerDropout>(options.dropout, seed(1)));
  linear2 = register_module("linear2",
                            std::make_shared<Linear>(LinearOptions{ff, d}.with_dtype(dtype).with_generator(generator)));
  const auto norm = LayerNormOptions{{d}}.with_eps(options.layer_norm_eps).with_dtype(dtype);
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(norm));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(norm));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(norm));
  dropout1 = register_module("dropout1", std::make_shared<TransformerDropout>(options.dropout, seed(2)));
  dropout2 = register_module("dropout2", std::make_shared<TransformerDropout>(options.dropout, seed(3)));
  dropout3 = register_module("dropout3", std::make_shared<TransformerDropout>(options.dropout, seed(5)));
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks) {
  tgt.check_defined("TransformerDecoderLayer");
  memory.check_defined("TransformerDecoderLayer");
  const std::int64_t d = options_.d_model;
  if ((tgt.dim() != 2 && tgt.dim() != 3) || tgt.size(-1) != d || memory.dim() != tgt.dim() || memory.size(-1) != d)
    fail("TransformerDecoderLayer: expected tgt and memory [length, B, {0}] ([B, length, {0}] batch_first, or "
         "unbatched [length, {0}]), got tgt {1} and memory {2}",
         d, shape_string(tgt.shape()), shape_string(memory.shape()));
  auto self_block = [&](const Tensor& x) {
    return (*dropout1)(
        self_attn->forward_with_weights(x, x, x, masks.tgt_key_padding_mask, false, masks.tgt_mask).attn_output);
  };
  auto memory_block = [&](const Tensor& x) {
    return (*dropout2)(multihead_attn
                           ->forward_with_weights(x, memory, memory, masks.memory_key_padding_mask, false,
                                                  masks.memory_mask)
                           .attn_output);
  };
  auto feed_forward = [&](const Tensor& x) {
    const Tensor hidden = (*linear1)(x);
    const Tensor activated = options_.activation == TransformerActivation::GELU ? gelu(hidden) : relu(hidden);
    return (*dropout3)((*linear2)((*dropout)(activated)));
  };
  if (options_.norm_first) {
    Tensor x = add(tgt, self_block((*norm1)(tgt)));
    x = add(x, memory_block((*norm2)(x)));
    return add(x, feed_forward((*norm3)(x)));
  }
  Tensor x = (*norm1)(add(tgt, self_block(tgt)));
  x = (*norm2)(add(x, memory_block(x)));
  return (*norm3)(add(x, feed_forward(x)));
}

std::string TransformerDecoderLayer::extra_repr() const {
  return fmt::format("d_model={}, nhead={}, dim_feedforward={}, dropout={}, activation={}, norm_first={}",
                     options_.d_model, options_.nhead, options_.dim_feedforward, options_.dropout,
                     options_.activation == TransformerActivation::GELU ? "gelu" : "relu", options_.norm_first);
}

std::shared_ptr<Module> TransformerDecoderLayer::clone() const {
  // Note: clone_into overwrites every value (the dropout seeds included): a throwaway init and fixed seeds.
  Generator scratch;
  TransformerDecoderLayerOptions options = options_;
  options.generator = &scratch;
  options.dropout_seed = 0;
  return clone_into(std::make_shared<TransformerDecoderLayer>(options));
}

// ---- TransformerDecoder ----

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, std::int64_t num_layers,
                                       std::shared_ptr<LayerNorm> final_norm)
    : Module("TransformerDecoder") {
  if (num_layers <= 0) fail("TransformerDecoder: num_layers must be greater than zero, got {}", num_layers);
  layers = register_module("layers", std::make_shared<Sequential>());
  for (std::int64_t i = 0; i < num_layers; ++i) layers->push_back(stack_copy(decoder_layer, i));
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoder::layer(std::int64_t index) const {
  return layers->at_as<TransformerDecoderLayer>(static_cast<std::size_t>(index));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks) {
  Tensor output = tgt;
  for (std::int64_t i = 0; i < num_layers(); ++i) output = layer(i)->forward(output, memory, masks);
  return norm ? (*norm)(output) : output;
}

std::shared_ptr<Module> TransformerDecoder::clone() const {
  const auto fresh_norm = norm ? std::dynamic_pointer_cast<LayerNorm>(norm->clone()) : nullptr;
  return clone_into(std::make_shared<TransformerDecoder>(*layer(0), num_layers(), fresh_norm));
}

// ---- Transformer ----

Transformer::Transformer(TransformerOptions options) : Module("Transformer"), options_(options) {
  Generator& generator = options.generator ? *options.generator : default_generator();
  auto layer_options = TransformerEncoderLayerOptions(options.d_model, options.nhead)
                                 .with_dim_feedforward(options.dim_feedforward)
                                 .with_dropout(options.dropout)
                                 .with_activation(options.activation)
                                 .with_layer_norm_eps(options.layer_norm_eps)
                                 .with_batch_first(options.batch_first)
                                 .with_norm_first(options.norm_first)
                                 .with_dtype(options.dtype)
                                 .with_generator(generator);
  if (options.dropout_seed) layer_options.with_dropout_seed(*options.dropout_seed);
  const auto norm = LayerNormOptions{{options.d_model}}.with_eps(options.layer_norm_eps).with_dtype(options.dtype);
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(TransformerEncoderLayer(layer_options),
                                                                            options.num_encoder_layers,
                                                                            std::make_shared<LayerNorm>(norm)));
  // Note: the decoder's streams are seeded apart from the encoder's.
  if (options.dropout_seed) layer_options.with_dropout_seed(tapegrad::detail::splitmix64_finalizer(*options.dropout_seed ^ 0xdec0de));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(TransformerDecoderLayer(layer_options),
                                                                            options.num_decoder_layers,
                                                                            std::make_shared<LayerNorm>(norm)));
  for (Tensor p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p, 1.0, generator);
  options_.generator = nullptr;
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const SourceMasks& source,
                            const TransformerDecoderMasks& target) {
  src.check_defined("Transformer");
  tgt.check_defined("Transformer");
  const bool batched = src.dim() == 3;
  const std::int64_t batch_dim = options_.batch_first ? 0 : 1;
  if (batched && (tgt.dim() != 3 || src.size(batch_dim) != tgt.size(batch_dim)))
    fail("Transformer: the batch number of src and tgt must be equal, got src {} and tgt {}",
         shape_string(src.shape()), shape_string(tgt.shape()));
  if (src.size(-1) != options_.d_model || tgt.size(-1) != options_.d_model)
    fail("Transformer: the feature number of src and tgt must be equal to d_model {}, got src {} and tgt {}",
         options_.d_model, shape_string(src.shape()), shape_string(tgt.shape()));
  const Tensor memory = encoder->forward(src, source.src_mask, source.src_key_padding_mask);
  return decoder->forward(tgt, memory, target);
}

std::shared_ptr<Module> Transformer::clone() const {
  Generator scratch;
  TransformerOptions options = options_;
  options.generator = &scratch;
  options.dropout_seed = 0;
  return clone_into(std::make_shared<Transformer>(options));
}

}  // namespace tapegrad::nn
