#pragma once
/// nn::TransformerEncoderLayer and nn::TransformerEncoder with PyTorch 1.13's options, submodule names (so a
/// PyTorch state_dict loads strictly) and forward, and generate_square_subsequent_mask.
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

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// The feed-forward activation of the transformer layers (PyTorch's activation="relu" / "gelu", exact GELU).
enum class TransformerActivation { ReLU, GELU };

/// nn::Dropout's behaviour and random stream (seed, count), with the two counters in non-persistent buffers:
/// PyTorch's Dropout has no state, so a transformer's state_dict from PyTorch loads strictly.
class TransformerDropout : public Module {
 public:
  /// seed: the stream's seed (by default one draw from the default generator when p > 0, as nn::Dropout).
  explicit TransformerDropout(double p, std::optional<std::uint64_t> seed = std::nullopt);
  Tensor forward(const Tensor& input) override;
  /// forward(relu(input)), as one fused op in training (the same mask, values and gradients).
  Tensor forward_relu(const Tensor& input);
  /// add(residual, forward(input)), as one fused op in training (the same mask, values and gradients).
  Tensor forward_add(const Tensor& residual, const Tensor& input);
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return p_; }

  Tensor mask_seed;
  Tensor num_masks_drawn;

 private:
  /// True when a forward now draws a mask (training, p > 0).
  bool drops() const { return is_training() && p_ != 0.0; }
  /// The generator of the next mask (from the seed and the count of masks drawn so far); counts it.
  Generator next_generator();
  double p_;
};

/// Options for TransformerEncoderLayer, with PyTorch's names and defaults.
struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(std::int64_t model, std::int64_t heads) : d_model(model), nhead(heads) {}
  std::int64_t d_model = 0;
  std::int64_t nhead = 1;
  std::int64_t dim_feedforward = 2048;
  /// Dropout on the attention weights, inside the feed-forward block and on both residual branches.
  double dropout = 0.1;
  TransformerActivation activation = TransformerActivation::ReLU;
  double layer_norm_eps = 1e-5;
  /// Input and output [B, L, d_model] instead of [L, B, d_model].
  bool batch_first = false;
  /// Pre-norm (x + sa(norm1(x)), x + ff(norm2(x))) instead of post-norm (norm1(x + sa(x)), norm2(x + ff(x))).
  bool norm_first = false;
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  /// Seeds every dropout stream of the layer (each its own, derived from this one); by default each draws one
  /// seed from the default generator.
  std::optional<std::uint64_t> dropout_seed;
  TransformerEncoderLayerOptions& with_dim_feedforward(std::int64_t n) { dim_feedforward = n; return *this; }
  TransformerEncoderLayerOptions& with_dropout(double p) { dropout = p; return *this; }
  TransformerEncoderLayerOptions& with_activation(TransformerActivation a) { activation = a; return *this; }
  TransformerEncoderLayerOptions& with_layer_norm_eps(double e) { layer_norm_eps = e; return *this; }
  TransformerEncoderLayerOptions& with_batch_first(bool on) { batch_first = on; return *this; }
  TransformerEncoderLayerOptions& with_norm_first(bool on) { norm_first = on; return *this; }
  TransformerEncoderLayerOptions& with_dtype(DType d) { dtype = d; return *this; }
  TransformerEncoderLayerOptions& with_generator(Generator& g) { generator = &g; return *this; }
  TransformerEncoderLayerOptions& with_dropout_seed(std::uint64_t seed) { dropout_seed = seed; return *this; }
};

/// Self-attention and a feed-forward block, each with a residual connection and a LayerNorm, as PyTorch's
/// TransformerEncoderLayer: submodules self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(TransformerEncoderLayerOptions options);
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead)
      : TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)) {}
  /// src [L, B, d_model] ([B, L, d_model] batch_first, [L, d_model] unbatched), without masks.
  Tensor forward(const Tensor& src) override;
  /// With PyTorch's src_mask ([L, L] or [B * nhead, L, L]) and src_key_padding_mask ([B, L]); see
  /// MultiheadAttention for how masks are given (masked_out() for PyTorch's boolean masks).
  Tensor forward(const Tensor& src, const AttentionMask& src_mask,
                 const AttentionMask& src_key_padding_mask = AttentionMask());
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const TransformerEncoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<TransformerDropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<TransformerDropout> dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x);
  TransformerEncoderLayerOptions options_;
};

/// A stack of num_layers copies of an encoder layer (children layers.0, layers.1, ...) and an optional final
/// LayerNorm (child norm), as PyTorch's TransformerEncoder.
/// Note: as PyTorch's _get_clones (copy.deepcopy), every layer starts as an exact copy of the given one,
/// parameters included; only the dropout streams differ: copy i's seeds are mixed with i, so that the layers
/// do not drop the same positions (PyTorch's layers all draw from the global generator).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, std::int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& src) override;
  /// Every layer with the same mask and src_key_padding_mask, then norm.
  Tensor forward(const Tensor& src, const AttentionMask& mask,
                 const AttentionMask& src_key_padding_mask = AttentionMask());
  std::shared_ptr<Module> clone() const override;
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers->size()); }
  std::shared_ptr<TransformerEncoderLayer> layer(std::int64_t index) const;

  std::shared_ptr<Sequential> layers;
  /// Null when built without a final norm.
  std::shared_ptr<LayerNorm> norm;
};

/// A [sz, sz] causal additive mask: -inf above the diagonal, 0 on and below it, as PyTorch 1.13's
/// nn.Transformer.generate_square_subsequent_mask.
Tensor generate_square_subsequent_mask(std::int64_t sz, DType dtype = DType::Float32);

}  // namespace tapegrad::nn

TAPEGRAD_API_END
