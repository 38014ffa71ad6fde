#pragma once
/// Scaled dot-product attention as one op: softmax(q kᵀ / sqrt(E) + mask) v, with PyTorch 2.x's
/// F.scaled_dot_product_attention semantics.
#include <tapegrad/export.h>
#include <utility>

#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// How an attention mask is read: added to the scaled scores (PyTorch's float mask), or as a keep-mask whose
/// non-zero entries take part and whose zeros are excluded (PyTorch's bool mask; tapegrad has no bool dtype).
enum class AttentionMaskKind { Additive, Keep };

/// An attention mask and how to read it. A float tensor converts to an additive mask, as a float mask does in
/// PyTorch; a keep-mask (any dtype, non-zero = take part) must be asked for with AttentionMask::keep, because
/// tapegrad's comparisons return 0/1 tensors of their inputs' dtype, which must not be mistaken for additive
/// terms. An int64 tensor passed where an additive mask is expected is an error.
struct AttentionMask {
  Tensor values;
  AttentionMaskKind kind = AttentionMaskKind::Additive;

  /// No mask.
  AttentionMask() = default;
  /// An additive mask (implicit, so `scaled_dot_product_attention(q, k, v, bias)` reads as in PyTorch).
  AttentionMask(Tensor additive) : values(std::move(additive)) {}  // NOLINT(google-explicit-constructor)
  /// Non-zero entries take part, zeros are excluded (their weight is 0), like PyTorch's boolean attn_mask.
  static AttentionMask keep(Tensor mask) { return {std::move(mask), AttentionMaskKind::Keep}; }
  /// Added to q kᵀ / sqrt(E) before the softmax (-inf excludes an entry); differentiable when it requires grad.
  static AttentionMask additive(Tensor bias) { return {std::move(bias), AttentionMaskKind::Additive}; }

 private:
  AttentionMask(Tensor mask, AttentionMaskKind mask_kind) : values(std::move(mask)), kind(mask_kind) {}
};

/// softmax(q kᵀ · scale + mask) v for q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev], with
/// scale = 1 / sqrt(E). The leading dims of q, k and v broadcast as torch.matmul's; the mask must broadcast to
/// [..., L, S] (it cannot add batch dims). is_causal keeps entry (i, j) when j <= i (top-left aligned, as
/// torch's tril(ones(L, S))) and cannot be combined with a mask. A row with no entry taking part (all keep-mask
/// zeros, or all -inf) is NaN, as in PyTorch 2.0-2.4 and torch 1.13's MultiheadAttention.
/// dropout_p drops attention weights (after the softmax) with probability dropout_p and scales the kept ones
/// by 1 / (1 - dropout_p), drawing from `generator` exactly as dropout() does on the [..., L, S] weights. As in
/// PyTorch it applies whenever dropout_p > 0: pass `training ? p : 0.0`. float32 or float64; one tape record,
/// differentiable in q, k, v and an additive mask, twice differentiable (create_graph).
/// Note: the record keeps q, k, v and the mask (the inputs, not copies when contiguous), two [..., L] rows of
/// softmax statistics and, with dropout, a copy of the generator (about 2.5 KB) to replay the mask; never the
/// [..., L, S] weights. Forward and first-order backward work on one L x S block at a time per thread (one buffer
/// in the forward, two in the backward, plus L x S bytes of mask with dropout, for each OpenMP thread that takes
/// (batch, head) blocks); backward under create_graph runs on
/// whole [..., L, S] tensors of recorded ops.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionMask& attn_mask = AttentionMask(), double dropout_p = 0.0,
                                    bool is_causal = false, Generator& generator = default_generator());

}  // namespace tapegrad

TAPEGRAD_API_END
