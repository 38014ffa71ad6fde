// scaled_dot_product_attention: one record for softmax(q kᵀ · scale + mask) v, and packed_self_attention
// (ops/detail/attention_packed.h), the same over MultiheadAttention's packed projection. The block loops are
// kernels/attention: per (batch, head) block two GEMMs around a max-shifted row softmax in one L x S buffer per
// thread. The record saves per row the softmax's shift and log-total, not the weights; the first-order backward
// recomputes each block's weights from them (flash-attention style) and under create_graph the same rules run
// as recorded ops, so the gradients are differentiable.
#include <tapegrad/framework/ops/attention.h>
#include <tapegrad/framework/ops/detail/attention_packed.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/kernels/attention.h>
#include <tapegrad/framework/kernels/dropout_mask.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/linalg.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/ops/softmax.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The broadcast batch of q, k and v, and each block's place and treatment (kernels/attention.h).
struct Plan : kernels::AttentionPlan {
  Shape batch;  // the broadcast leading dims of q, k and v
};

// Element offsets of each block of a contiguous tensor of shape `shape` broadcast to batch + [rows, cols];
// also returns the strides of its last two dims (0 where broadcast).
std::vector<std::int64_t> block_offsets(Shape shape, const Shape& batch, std::int64_t* row_stride = nullptr,
                                        std::int64_t* col_stride = nullptr) {
  shape.insert(shape.begin(), batch.size() + 2 - shape.size(), 1);
  const Shape strides = contiguous_strides(shape);
  const auto stride = [&](std::size_t d) { return shape[d] == 1 ? std::int64_t{0} : strides[d]; };
  if (row_stride) *row_stride = stride(batch.size());
  if (col_stride) *col_stride = stride(batch.size() + 1);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(shape_numel(batch)), 0);
  for (std::size_t b = 0; b < offsets.size(); ++b) {
    auto rest = static_cast<std::int64_t>(b);
    for (std::size_t d = batch.size(); d-- > 0;) {
      offsets[b] += (rest % batch[d]) * stride(d);
      rest /= batch[d];
    }
  }
  return offsets;
}

// True when no two blocks share an operand block (nothing broadcast), so their gradients can be written at once.
bool distinct_blocks(const std::vector<std::int64_t>& offsets) {
  for (std::size_t b = 1; b < offsets.size(); ++b)
    if (offsets[b] <= offsets[b - 1]) return false;
  return true;
}

// The dropout factors of every weight, [batch..., L, S] (M = keep / (1 - p)), for the composed backward.
Tensor dropout_factors(const Plan& p, Generator generator, DType dtype) {
  Shape shape = p.batch;
  shape.push_back(p.L);
  shape.push_back(p.S);
  Tensor factors = empty(shape, dtype);
  std::vector<unsigned char> keep(static_cast<std::size_t>(factors.numel()));
  kernels::DropoutStream(generator, p.dropout_p).next(keep.data(), factors.numel());
  detail::dispatch_floating(dtype, kOp, [&](auto tag) {
    using T = decltype(tag);
    T* f = factors.data<T>();
    const T kept = p.dropout_p == 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - p.dropout_p));
    for (std::size_t j = 0; j < keep.size(); ++j) f[j] = keep[j] ? kept : T(0);
  });
  return factors;
}

// The causal rule as a [L, S] tensor of 1 where an entry is excluded (column after row).
Tensor causal_exclusion(std::int64_t L, std::int64_t S, DType dtype) {
  std::vector<double> values(static_cast<std::size_t>(L * S), 0.0);
  for (std::int64_t r = 0; r < L; ++r)
    for (std::int64_t c = r + 1; c < S; ++c) values[static_cast<std::size_t>(r * S + c)] = 1.0;
  return from_vector(values, {L, S}, TensorOptions{}.with_dtype(dtype));
}

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

Plan make_plan(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& attn_mask, double dropout_p,
               bool is_causal) {
  q.check_defined(kOp);
  k.check_defined(kOp);
  v.check_defined(kOp);
  const auto shapes = [&] {
    return fmt::format("query {}, key {}, value {}", shape_string(q.shape()), shape_string(k.shape()),
                       shape_string(v.shape()));
  };
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail("{}: query, key and value need at least 2 dims [..., L, E], got {}", kOp, shapes());
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() || !is_floating(q.dtype()))
    fail("{}: query, key and value must share one float dtype, got {}, {} and {}", kOp, dtype_name(q.dtype()),
         dtype_name(k.dtype()), dtype_name(v.dtype()));
  Plan p;
  p.L = q.shape().end()[-2], p.E = q.shape().back(), p.S = k.shape().end()[-2], p.Ev = v.shape().back();
  if (k.shape().back() != p.E)
    fail("{}: the embedding size of query ({}) and key ({}) differ ({})", kOp, p.E, k.shape().back(), shapes());
  if (v.shape().end()[-2] != p.S)
    fail("{}: key and value need the same sequence length S, got {} and {} ({})", kOp, p.S, v.shape().end()[-2],
         shapes());
  try {
    p.batch = broadcast_shapes(broadcast_shapes(leading(q.shape()), leading(k.shape()), kOp), leading(v.shape()), kOp);
  } catch (const Error&) {
    fail("{}: the batch dims of {} do not broadcast", kOp, shapes());
  }
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail("{}: dropout_p has to be between 0 and 1, got {}", kOp, dropout_p);
  const Tensor& mask = attn_mask.values;
  p.has_mask = mask.defined();
  p.keep_mask = attn_mask.kind == AttentionMaskKind::Keep;
  if (p.has_mask && is_causal)
    fail("{}: an explicit attn_mask ({}) cannot be combined with is_causal=true", kOp, shape_string(mask.shape()));
  if (p.has_mask && !p.keep_mask && mask.dtype() != q.dtype())
    fail("{}: an additive attn_mask must have the query's dtype {}, got {} (for a keep-mask of 0/1 entries use "
         "AttentionMask::keep)",
         kOp, dtype_name(q.dtype()), dtype_name(mask.dtype()));
  Shape weights = p.batch;
  weights.push_back(p.L);
  weights.push_back(p.S);
  if (p.has_mask) {
    bool fits = mask.dim() <= static_cast<std::int64_t>(weights.size());
    for (std::size_t d = 0; fits && d < mask.shape().size(); ++d) {
      const std::int64_t extent = mask.shape().end()[-1 - static_cast<std::ptrdiff_t>(d)];
      fits = extent == 1 || extent == weights.end()[-1 - static_cast<std::ptrdiff_t>(d)];
    }
    if (!fits)
      fail("{}: attn_mask of shape {} does not broadcast to the attention weights' shape {} ({})", kOp,
           shape_string(mask.shape()), shape_string(weights), shapes());
  }
  p.causal = is_causal;
  p.dropout_p = dropout_p;
  p.scale = 1.0 / std::sqrt(static_cast<double>(p.E));
  p.blocks = shape_numel(p.batch);
  // The kernels read contiguous copies of q, k and v (scaled_dot_product_attention makes them).
  p.q = {block_offsets(q.shape(), p.batch), p.E};
  p.k = {block_offsets(k.shape(), p.batch), p.E};
  p.v = {block_offsets(v.shape(), p.batch), p.Ev};
  p.out = {block_offsets(Shape{p.blocks, p.L, p.Ev}, Shape{p.blocks}), p.Ev};
  if (p.has_mask) p.mask_offset = block_offsets(mask.shape(), p.batch, &p.mask_row_stride, &p.mask_col_stride);
  return p;
}

// The create_graph backward: the first-order rules as recorded ops on the whole [..., L, S] weights, so
// they are differentiable in g, q, k, v and the mask.
std::vector<Tensor> composed_backward(const Plan& p, const Tensor& g, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& mask, const Generator* replay, NeedsGrad needs) {
  Tensor s = mul(matmul(q, transpose(k, -1, -2)), p.scale);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  // Note: a keep-mask enters as an additive 0 / -inf term, because it may carry batch dims that q kᵀ lacks
  // (they come from v), which masked_fill would refuse.
  if (p.has_mask) s = add(s, p.keep_mask ? masked_fill(zeros_like(mask), eq(mask, 0.0), minus_inf) : mask);
  if (p.causal) s = masked_fill(s, causal_exclusion(p.L, p.S, q.dtype()), minus_inf);
  const Tensor weights = softmax(s, -1);
  const Tensor factors = replay ? dropout_factors(p, *replay, q.dtype()) : Tensor();
  std::vector<Tensor> grads(4);
  if (needs[2]) grads[2] = sum_to(matmul(transpose(replay ? mul(weights, factors) : weights, -1, -2), g), v.shape());
  if (needs[0] || needs[1] || needs[3]) {
    Tensor dp = matmul(g, transpose(v, -1, -2));
    if (replay) dp = mul(dp, factors);
    const Tensor ds = mul(weights, sub(dp, sum(mul(dp, weights), {-1}, true)));
    if (needs[0]) grads[0] = sum_to(mul(matmul(ds, k), p.scale), q.shape());
    if (needs[1]) grads[1] = sum_to(mul(matmul(transpose(ds, -1, -2), q), p.scale), k.shape());
    if (needs[3]) grads[3] = sum_to(ds, mask.shape());
  }
  return grads;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& attn_mask,
                                    double dropout_p, bool is_causal, Generator& generator) {
  const Plan p = make_plan(q, k, v, attn_mask, dropout_p, is_causal);
  // A keep-mask is read as 0/1 of the query's dtype; it carries no gradient.
  const Tensor mask = !p.has_mask ? Tensor()
                      : p.keep_mask ? ne(attn_mask.values.detach(), 0.0).to(q.dtype())
                                    : attn_mask.values;
  const Tensor qc = q.detach().contiguous(), kc = k.detach().contiguous(), vc = v.detach().contiguous();
  const Tensor mc = mask.defined() ? mask.detach().contiguous() : Tensor();
  Shape out_shape = p.batch, rows_shape = p.batch;
  out_shape.push_back(p.L);
  out_shape.push_back(p.Ev);
  rows_shape.push_back(p.L);
  Tensor out = empty(out_shape, q.dtype());
  Tensor row_shift = empty(rows_shape, q.dtype()), row_log_total = empty(rows_shape, q.dtype());
  // Note: the generator's state before any draw, kept so that backward replays this call's dropout mask
  // (about 2.5 KB) instead of saving [..., L, S] mask values.
  const Tensor differentiable_mask = p.has_mask && !p.keep_mask ? mask : Tensor();
  std::optional<Generator> replay;
  if (p.dropout_p > 0 && should_record({q, k, v, differentiable_mask})) replay = generator;
  detail::dispatch_floating(q.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_forward<T>(p, qc.data<T>(), kc.data<T>(), vc.data<T>(), mc.defined() ? mc.data<T>() : nullptr,
                                  p.dropout_p > 0 ? &generator : nullptr, nullptr, out.data<T>(), row_shift.data<T>(),
                                  row_log_total.data<T>());
  });
  // Note: for the ONNX exporter (framework/onnx/detail/converters_attention.cpp), what the inputs do not say.
  if (trace::active()) [[unlikely]]
    trace::annotate(out, {{"is_causal", std::int64_t{is_causal}}, {"dropout_p", p.dropout_p},
                          {"keep_mask", p.keep_mask ? mask : Tensor()}});
  return record_if_needed(kOp, out, {q, k, v, differentiable_mask}, [&] {
    return [p, sq = SavedTensor(q, kOp), sk = SavedTensor(k, kOp), sv = SavedTensor(v, kOp),
            smask = mask.defined() ? SavedTensor(mask, kOp) : SavedTensor(), sshift = SavedTensor(row_shift, kOp),
            slog = SavedTensor(row_log_total, kOp), replay](const Tensor& g, NeedsGrad needs) {
      const Tensor& mask_values = smask.get();
      if (is_grad_enabled())
        return composed_backward(p, g, sq.get(), sk.get(), sv.get(), mask_values, replay ? &*replay : nullptr, needs);
      const Tensor qv = sq.get().detach().contiguous(), kv = sk.get().detach().contiguous(),
                   vv = sv.get().detach().contiguous(), gv = g.detach().contiguous();
      const Tensor mv = mask_values.defined() ? mask_values.detach().contiguous() : Tensor();
      // Note: when no two blocks share an operand block, each block writes its own gradient blocks once
      // (nothing to zero first) and blocks run on several threads; broadcast operands accumulate.
      const bool disjoint = !needs[3] && distinct_blocks(p.q.offset) && distinct_blocks(p.k.offset) &&
                            distinct_blocks(p.v.offset);
      const auto gradient = [&](const Tensor& like) {
        return disjoint ? empty(like.shape(), like.dtype()) : zeros(like.shape(), TensorOptions{}.with_dtype(like.dtype()));
      };
      std::vector<Tensor> grads(4);
      if (needs[0]) grads[0] = gradient(qv);
      if (needs[1]) grads[1] = gradient(kv);
      if (needs[2]) grads[2] = gradient(vv);
      if (needs[3]) grads[3] = zeros(mv.shape(), TensorOptions{}.with_dtype(qv.dtype()));
      std::optional<Generator> stream = replay;  // a fresh copy: a retained graph may run backward again
      detail::dispatch_floating(qv.dtype(), kOp, [&](auto tag) {
        using T = decltype(tag);
        const auto out_ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
        kernels::AttentionGradients<T> into;
        into.dq = out_ptr(grads[0]), into.dk = out_ptr(grads[1]), into.dv = out_ptr(grads[2]);
        into.dmask = out_ptr(grads[3]);
        into.dq_layout = p.q, into.dk_layout = p.k, into.dv_layout = p.v;
        into.overwrite = into.disjoint = disjoint;
        kernels::attention_backward<T>(p, qv.data<T>(), kv.data<T>(), vv.data<T>(), mv.defined() ? mv.data<T>() : nullptr,
                                       gv.data<T>(), sshift.get().data<T>(), slog.get().data<T>(), nullptr,
                                       stream ? &*stream : nullptr, into);
      });
      return grads;
    };
  });
}

Tensor detail::packed_self_attention(const Tensor& qkv_in, std::int64_t heads, const Tensor& mask_in,
                                     double dropout_p, Generator& generator) {
  constexpr const char* op = "packed_self_attention";
  const Tensor qkv = qkv_in.contiguous(), mask = mask_in.defined() ? mask_in.contiguous() : Tensor();
  if (qkv.dim() != 3 || heads <= 0 || qkv.size(2) % (3 * heads) != 0 || !is_floating(qkv.dtype()))
    fail("{}: expected a float [L, B, 3E] projection with E divisible by {} heads, got {} {}", op, heads,
         dtype_name(qkv.dtype()), shape_string(qkv.shape()));
  const std::int64_t L = qkv.size(0), B = qkv.size(1), E = qkv.size(2) / 3, hd = E / heads;
  Plan p;
  p.batch = {B * heads};
  p.blocks = B * heads, p.L = L, p.S = L, p.E = hd, p.Ev = hd;
  p.scale = 1.0 / std::sqrt(static_cast<double>(hd));
  p.dropout_p = dropout_p;
  p.has_mask = mask.defined();
  if (p.has_mask) {
    if (mask.requires_grad() || mask.dtype() != qkv.dtype() || mask.dim() > 3)
      fail("{}: the mask must be an additive {} tensor without grad, broadcasting to [{}, {}, {}], got {} {}", op,
           dtype_name(qkv.dtype()), B * heads, L, L, dtype_name(mask.dtype()), shape_string(mask.shape()));
    p.mask_offset = block_offsets(mask.shape(), p.batch, &p.mask_row_stride, &p.mask_col_stride);
  }
  // Block (sample i, head h) of q starts at row 0, column i * 3E + h * hd of the [L, B * 3E] matrix; k and v
  // E and 2E columns further; the output's at i * E + h * hd of [L, B * E].
  std::vector<std::int64_t> q_offset(static_cast<std::size_t>(p.blocks)), out_offset(q_offset.size());
  for (std::int64_t b = 0; b < p.blocks; ++b) {
    q_offset[static_cast<std::size_t>(b)] = (b / heads) * 3 * E + (b % heads) * hd;
    out_offset[static_cast<std::size_t>(b)] = (b / heads) * E + (b % heads) * hd;
  }
  const auto shifted = [&](std::int64_t by) {
    std::vector<std::int64_t> offsets = q_offset;
    for (auto& o : offsets) o += by;
    return kernels::BlockLayout{offsets, B * 3 * E};
  };
  p.q = shifted(0), p.k = shifted(E), p.v = shifted(2 * E);
  p.out = {out_offset, B * E};
  Tensor out = empty({L, B, E}, qkv.dtype());
  Tensor row_shift = empty({p.blocks, L}, qkv.dtype()), row_log_total = empty({p.blocks, L}, qkv.dtype());
  // Note: with dropout, the record keeps the mask's keep bytes (blocks * L * L, a quarter of the float32 weights)
  // for the first-order backward, which would otherwise draw the whole mask again (the generator is serial), and a
  // copy of the generator for the create_graph backward.
  std::optional<Generator> replay;
  std::shared_ptr<Storage> keep;
  if (dropout_p > 0 && should_record({qkv})) {
    replay = generator;
    keep = std::make_shared<Storage>(static_cast<std::size_t>(p.blocks * L * L));
  }
  detail::dispatch_floating(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_forward<T>(p, qkv.data<T>(), qkv.data<T>(), qkv.data<T>(), p.has_mask ? mask.data<T>() : nullptr,
                                  dropout_p > 0 ? &generator : nullptr,
                                  keep ? static_cast<unsigned char*>(keep->data()) : nullptr, out.data<T>(), row_shift.data<T>(),
                                  row_log_total.data<T>());
  });
  return record_if_needed(op, out, {qkv}, [&] {
    // Note: the mask is saved with its version: it is often the caller's own tensor (contiguous() returns it), and
    // the backward recomputes the weights from it, so a mask written in place since would give wrong gradients.
    return [p, sqkv = SavedTensor(qkv, op), smask = mask.defined() ? SavedTensor(mask, op) : SavedTensor(),
            sshift = SavedTensor(row_shift, op), slog = SavedTensor(row_log_total, op), replay, keep,
            heads](const Tensor& g, NeedsGrad needs) {
      const Tensor& x = sqkv.get();
      const Tensor& mask = smask.get();
      const std::int64_t L = p.L, B = x.size(1), E = x.size(2) / 3, hd = p.E;
      if (is_grad_enabled()) {
        // create_graph: the composed rules on [B * heads, L, hd] views of the thirds, differentiable in g and qkv.
        const auto heads_of = [&](const Tensor& t) {  // [L, B, E] -> [B * heads, L, hd]
          return t.reshape({L, B, heads, hd}).permute({1, 2, 0, 3}).reshape({B * heads, L, hd});
        };
        const auto third = [&](std::int64_t i) { return heads_of(x.narrow(2, i * E, E)); };
        std::vector<Tensor> parts = composed_backward(p, heads_of(g), third(0), third(1), third(2), mask,
                                                      replay ? &*replay : nullptr, NeedsGrad(0b0111));
        for (Tensor& part : parts)
          if (part.defined()) part = part.reshape({B, heads, L, hd}).permute({2, 0, 1, 3}).reshape({L, B, E});
        return std::vector<Tensor>{cat({parts[0], parts[1], parts[2]}, 2)};
      }
      (void)needs;
      const Tensor gv = g.detach().contiguous();
      Tensor dqkv = empty(x.shape(), x.dtype());
      detail::dispatch_floating(x.dtype(), "packed_self_attention", [&](auto tag) {
        using T = decltype(tag);
        kernels::AttentionGradients<T> into;
        T* d = dqkv.data<T>();
        into.dq = d, into.dk = d, into.dv = d;
        into.dq_layout = p.q, into.dk_layout = p.k, into.dv_layout = p.v;
        into.overwrite = into.disjoint = true;  // every element of dqkv belongs to one block of one third
        const T* values = x.data<T>();
        kernels::attention_backward<T>(p, values, values, values, mask.defined() ? mask.data<T>() : nullptr,
                                       gv.data<T>(), sshift.get().data<T>(), slog.get().data<T>(),
                                       keep ? static_cast<const unsigned char*>(keep->data()) : nullptr, nullptr, into);
      });
      return std::vector<Tensor>{dqkv};
    };
  });
}

}  // namespace tapegrad
