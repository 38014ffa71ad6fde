#pragma once
/// nn::TransformerDecoderLayer, nn::TransformerDecoder and nn::Transformer with PyTorch 1.13's options,
/// submodule names (so a PyTorch state_dict loads strictly) and forward.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/attention.h>
#include <tapegrad/layers/layer_norm.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/multihead_attention.h>
#include <tapegrad/layers/sequential.h>
#include <tapegrad/layers/transformer_encoder.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for TransformerDecoderLayer: the encoder layer's (PyTorch's names and defaults are the same).
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

/// The masks of a decoder forward, with PyTorch's names: tgt_mask [T, T] or [B * nhead, T, T], memory_mask
/// [T, S] or [B * nhead, T, S], tgt_key_padding_mask [B, T], memory_key_padding_mask [B, S] (see
/// MultiheadAttention for how masks are given; masked_out() for PyTorch's boolean masks).
struct TransformerDecoderMasks {
  AttentionMask tgt_mask;
  AttentionMask memory_mask;
  AttentionMask tgt_key_padding_mask;
  AttentionMask memory_key_padding_mask;
};

/// Self-attention over the target, attention to the memory (the encoder's output) and a feed-forward block,
/// each with a residual connection and a LayerNorm, as PyTorch's TransformerDecoderLayer: submodules
/// self_attn, multihead_attn, linear1, dropout, linear2, norm1, norm2, norm3, dropout1, dropout2, dropout3.
class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(TransformerDecoderLayerOptions options);
  TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead)
      : TransformerDecoderLayer(TransformerDecoderLayerOptions(d_model, nhead)) {}
  /// tgt [T, B, d_model] and memory [S, B, d_model] ([B, ., d_model] batch_first, [., d_model] unbatched).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {});
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const TransformerDecoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<TransformerDropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<TransformerDropout> dropout1, dropout2, dropout3;

 private:
  // Note: a decoder takes the target and the memory; Module's one-tensor forward stays unreachable (private),
  // named here so that it is not merely hidden (clang's -Woverloaded-virtual), as in the losses (loss.h).
  using Module::forward;
  TransformerDecoderLayerOptions options_;
};

/// A stack of num_layers copies of a decoder layer (layers.0, ...) and an optional final LayerNorm (norm), as
/// PyTorch's TransformerDecoder; the copies follow TransformerEncoder's rule (same parameters, own dropout streams).
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, std::int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  /// Every layer with the same memory and masks, then norm.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {});
  std::shared_ptr<Module> clone() const override;
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers->size()); }
  std::shared_ptr<TransformerDecoderLayer> layer(std::int64_t index) const;

  std::shared_ptr<Sequential> layers;
  /// Null when built without a final norm.
  std::shared_ptr<LayerNorm> norm;

 private:
  // Note: a decoder takes the target and the memory; Module's one-tensor forward stays unreachable (private),
  // named here so that it is not merely hidden (clang's -Woverloaded-virtual), as in the losses (loss.h).
  using Module::forward;
};

/// Options for Transformer, with PyTorch's names and defaults.
struct TransformerOptions {
  std::int64_t d_model = 512;
  std::int64_t nhead = 8;
  std::int64_t num_encoder_layers = 6;
  std::int64_t num_decoder_layers = 6;
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  TransformerActivation activation = TransformerActivation::ReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  /// Seeds every dropout stream (each its own, derived from it); by default each draws one from the default generator.
  std::optional<std::uint64_t> dropout_seed;
  TransformerOptions& with_d_model(std::int64_t n) { d_model = n; return *this; }
  TransformerOptions& with_nhead(std::int64_t n) { nhead = n; return *this; }
  TransformerOptions& with_num_encoder_layers(std::int64_t n) { num_encoder_layers = n; return *this; }
  TransformerOptions& with_num_decoder_layers(std::int64_t n) { num_decoder_layers = n; return *this; }
  TransformerOptions& with_dim_feedforward(std::int64_t n) { dim_feedforward = n; return *this; }
  TransformerOptions& with_dropout(double p) { dropout = p; return *this; }
  TransformerOptions& with_activation(TransformerActivation a) { activation = a; return *this; }
  TransformerOptions& with_layer_norm_eps(double e) { layer_norm_eps = e; return *this; }
  TransformerOptions& with_batch_first(bool on) { batch_first = on; return *this; }
  TransformerOptions& with_norm_first(bool on) { norm_first = on; return *this; }
  TransformerOptions& with_dtype(DType d) { dtype = d; return *this; }
  TransformerOptions& with_generator(Generator& g) { generator = &g; return *this; }
  TransformerOptions& with_dropout_seed(std::uint64_t seed) { dropout_seed = seed; return *this; }
};

/// PyTorch's nn.Transformer: an encoder (with a final LayerNorm) and a decoder (with one), children encoder and
/// decoder. Note: as PyTorch's _reset_parameters, every parameter with more than one dim is then redrawn by
/// xavier_uniform_ (so the layers no longer start identical).
class Transformer : public Module {
 public:
  explicit Transformer(TransformerOptions options = {});
  /// The masks of the encoder pass.
  struct SourceMasks {
    AttentionMask src_mask;
    AttentionMask src_key_padding_mask;
  };
  /// encoder(src) then decoder(tgt, memory): src [S, B, d_model], tgt [T, B, d_model] (batch_first: [B, ., .]).
  Tensor forward(const Tensor& src, const Tensor& tgt, const SourceMasks& source = {},
                 const TransformerDecoderMasks& target = {});
  std::shared_ptr<Module> clone() const override;
  const TransformerOptions& options() const { return options_; }

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;

 private:
  // Note: a Transformer takes the source and the target; Module's one-tensor forward stays unreachable (private),
  // named here so that it is not merely hidden (clang's -Woverloaded-virtual), as in the losses (loss.h).
  using Module::forward;
  TransformerOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
