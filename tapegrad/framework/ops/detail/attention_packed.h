#pragma once
// Internal: multi-head self-attention over a packed [L, B, 3E] projection (the q, k and v of every head side by
// side, as one in_proj GEMM writes them), as one op: it reads each head where it lies, writes the output as
// [L, B, E] (what out_proj reads) and its gradient as one [L, B, 3E] tensor (what in_proj's backward reads). The
// same values, dropout mask and gradients as MultiheadAttention's composition of three projections, head
// transposes and scaled_dot_product_attention, without the six transposed copies and the three gradient copies.
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// softmax(q kᵀ / sqrt(E / heads) + mask) v per (sample, head), q, k and v the thirds of qkv's last dim split
/// into heads; block b = sample * heads + head, as MultiheadAttention's [B * heads, L, head_dim] view. mask:
/// undefined or additive, broadcasting to [B * heads, L, L], not requiring grad. dropout_p > 0 draws from
/// `generator` as scaled_dot_product_attention does. Returns [L, B, E].
/// Note: with dropout the record keeps the mask's keep bytes (B * heads * L * L bytes) instead of replaying it from
/// the generator in backward: the draws are serial and were a tenth of a Transformer step's dropout work.
Tensor packed_self_attention(const Tensor& qkv, std::int64_t heads, const Tensor& mask, double dropout_p,
                             Generator& generator);

}  // namespace tapegrad::detail
