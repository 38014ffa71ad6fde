#pragma once
/// nn::MultiheadAttention with PyTorch 1.13's options, initialisation, state_dict names and
/// F.multi_head_attention_forward's semantics.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/attention.h>
#include <tapegrad/layers/linear.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for MultiheadAttention, with PyTorch's names and defaults.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(std::int64_t embed, std::int64_t heads) : embed_dim(embed), num_heads(heads) {}
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 1;
  /// Dropout probability on the attention weights, in training mode.
  double dropout = 0.0;
  /// in_proj_bias and out_proj.bias.
  bool bias = true;
  /// Learnable bias_k and bias_v [1, 1, embed_dim] appended to the keys and values.
  bool add_bias_kv = false;
  /// A zero key and value appended (after bias_k/bias_v).
  bool add_zero_attn = false;
  /// Features of key and value; 0 means embed_dim. Different from embed_dim: separate q/k/v projections.
  std::int64_t kdim = 0;
  std::int64_t vdim = 0;
  /// Inputs and output [B, L, E] instead of [L, B, E].
  bool batch_first = false;
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  /// The seed of the attention-dropout stream (by default one draw from the default generator at construction
  /// when dropout > 0, as nn::Dropout).
  std::optional<std::uint64_t> dropout_seed;
  MultiheadAttentionOptions& with_dropout(double p) { dropout = p; return *this; }
  MultiheadAttentionOptions& with_bias(bool on) { bias = on; return *this; }
  MultiheadAttentionOptions& with_add_bias_kv(bool on) { add_bias_kv = on; return *this; }
  MultiheadAttentionOptions& with_add_zero_attn(bool on) { add_zero_attn = on; return *this; }
  MultiheadAttentionOptions& with_kdim(std::int64_t n) { kdim = n; return *this; }
  MultiheadAttentionOptions& with_vdim(std::int64_t n) { vdim = n; return *this; }
  MultiheadAttentionOptions& with_batch_first(bool on) { batch_first = on; return *this; }
  MultiheadAttentionOptions& with_dtype(DType d) { dtype = d; return *this; }
  MultiheadAttentionOptions& with_generator(Generator& g) { generator = &g; return *this; }
  MultiheadAttentionOptions& with_dropout_seed(std::uint64_t seed) { dropout_seed = seed; return *this; }
};

/// A keep-mask from PyTorch 1.13 MultiheadAttention's boolean convention, where a non-zero (true) entry is NOT
/// allowed to take part: `masked_out(m)` is `AttentionMask::keep(eq(m, 0))`. Use it for a ported
/// `key_padding_mask` (true = padding) or boolean `attn_mask`; a float tensor stays an additive mask.
AttentionMask masked_out(const Tensor& mask);

/// What MultiheadAttention returns: attn_output [L, B, E] ([B, L, E] batch_first, [L, E] unbatched) and, when
/// asked for, attn_weights [B, L, S] averaged over heads or [B, num_heads, L, S] ([L, S] / [num_heads, L, S]
/// unbatched); S counts the appended bias_k and zero key.
struct MultiheadAttentionResult {
  Tensor attn_output;
  Tensor attn_weights;
};

/// Multi-head attention: per head softmax(q kᵀ / sqrt(head_dim) + mask) v over the projected query, key and
/// value, the heads concatenated and projected by out_proj.
/// Note: masks. tapegrad has no bool dtype, so masks are AttentionMask (ops/attention.h): a float tensor is
/// additive (PyTorch's float mask), AttentionMask::keep(m) takes part where m is non-zero, and masked_out(m) is
/// PyTorch MHA's boolean mask (non-zero = excluded). attn_mask is [L, S] or [B * num_heads, L, S]
/// ([num_heads, L, S] unbatched), key_padding_mask [B, S] ([S] unbatched); both are turned into additive
/// masks (0 / -inf for keep-masks) and added, which is what PyTorch 1.13 does for every combination it accepts.
/// A row with no key taking part is NaN, as in PyTorch 1.13.
/// Parameters: in_proj_weight [3E, E] when kdim == vdim == embed_dim, else q_proj_weight [E, E], k_proj_weight
/// [E, kdim], v_proj_weight [E, vdim]; in_proj_bias [3E]; bias_k, bias_v [1, 1, E]; out_proj (a Linear).
/// Initialised as PyTorch: xavier_uniform_ on the input projections, zero in_proj_bias and out_proj.bias,
/// xavier_normal_ on bias_k and bias_v, out_proj.weight as Linear's default. The dropout stream (seed, count)
/// is kept in two non-persistent buffers, so that a PyTorch state_dict loads strictly.
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(MultiheadAttentionOptions options);
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}

  /// Self-attention without masks: forward_with_weights(x, x, x, {}, false).attn_output.
  Tensor forward(const Tensor& input) override;
  /// PyTorch's MultiheadAttention.forward. Without need_weights the attention is one
  /// scaled_dot_product_attention record and attn_weights is undefined; with it the weights are computed by
  /// bmm and softmax (the ones after dropout are what the output uses; the returned ones too, as in PyTorch).
  MultiheadAttentionResult forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                                const AttentionMask& key_padding_mask = AttentionMask(),
                                                bool need_weights = true,
                                                const AttentionMask& attn_mask = AttentionMask(),
                                                bool average_attn_weights = true);
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  const MultiheadAttentionOptions& options() const { return options_; }
  /// Re-initialises every parameter as PyTorch's _reset_parameters (out_proj.weight is left as it is, as there).
  void reset_parameters(Generator& generator = default_generator());

  /// Defined when kdim == vdim == embed_dim; otherwise q_proj_weight, k_proj_weight, v_proj_weight are.
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight;
  /// Undefined without bias.
  Tensor in_proj_bias;
  /// Defined with add_bias_kv.
  Tensor bias_k, bias_v;
  std::shared_ptr<Linear> out_proj;
  /// The seed of the attention-dropout stream (non-persistent).
  Tensor mask_seed;
  /// Training-mode forwards with dropout so far (non-persistent).
  Tensor num_masks_drawn;

 private:
  MultiheadAttentionOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
