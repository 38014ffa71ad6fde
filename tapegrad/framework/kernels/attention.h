#pragma once
// Internal (not installed): the (batch, head) block loops of attention, softmax(q kᵀ · scale + mask) v, forward
// and first-order backward, for scaled_dot_product_attention and the packed multi-head op. Each block is two or
// five GEMMs around row passes over one L x S buffer; blocks are split across the OpenMP threads.
#include <cstdint>
#include <vector>

#include <tapegrad/framework/generator.h>

namespace tapegrad::kernels {

/// Where each (batch, head) block of one operand lies: block b's matrix starts at element offset[b], its rows
/// `ld` elements apart and its columns adjacent. Operands are read, and gradients written, where they lie (the
/// heads of a [L, B, 3E] projection, say), so no transposed copy is made.
struct BlockLayout {
  std::vector<std::int64_t> offset;
  std::int64_t ld = 0;
};

/// One attention call over `blocks` independent blocks: q L x E, k S x E, v S x Ev, out L x Ev.
struct AttentionPlan {
  std::int64_t blocks = 1, L = 0, S = 0, E = 0, Ev = 0;
  BlockLayout q, k, v;
  BlockLayout out;  // the output, and in backward the output's gradient
  std::vector<std::int64_t> mask_offset;                  // element offset of block b's L x S mask
  std::int64_t mask_row_stride = 0, mask_col_stride = 0;  // 0 where the mask broadcasts
  bool has_mask = false, keep_mask = false, causal = false;
  double scale = 1.0, dropout_p = 0.0;
};

/// Where the first-order backward writes (null: not wanted), laid out like the operands' blocks. With
/// `overwrite` each block's gradient is written (GEMM beta 0) instead of added to zeroed memory: right when no two
/// blocks share an operand block. `disjoint` lets blocks run on several threads at once; it must be false when
/// blocks share a gradient block or a mask gradient is wanted.
template <class T>
struct AttentionGradients {
  T *dq = nullptr, *dk = nullptr, *dv = nullptr, *dmask = nullptr;
  BlockLayout dq_layout, dk_layout, dv_layout;
  bool overwrite = false, disjoint = false;
};

/// Forward: out, and per row of each block the softmax's shift and log-total ([blocks, L], contiguous). With a
/// generator (dropout_p > 0) the weights are dropped as dropout() drops a [blocks, L, S] tensor drawn from it;
/// with `keep_out` too, the whole mask's keep bytes (blocks * L * S) are left there for the backward.
template <class T>
void attention_forward(const AttentionPlan& p, const T* q, const T* k, const T* v, const T* mask, Generator* generator,
                       unsigned char* keep_out, T* out, T* row_shift, T* row_log_total);

/// First-order backward from the output's gradient g (laid out as out), recomputing each block's weights from
/// the saved shift and log-total. Dropout: the forward's keep bytes, or else `generator`, a copy of the forward's
/// taken before it drew, which replays them.
template <class T>
void attention_backward(const AttentionPlan& p, const T* q, const T* k, const T* v, const T* mask, const T* g,
                        const T* row_shift, const T* row_log_total, const unsigned char* keep, Generator* generator,
                        const AttentionGradients<T>& grads);

}  // namespace tapegrad::kernels
