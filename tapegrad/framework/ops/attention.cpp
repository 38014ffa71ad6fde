// scaled_dot_product_attention: one record for softmax(q kᵀ · scale + mask) v. The forward runs one
// (batch, head) block at a time on each thread: two GEMMs around a max-shifted row softmax, in one L x S buffer
// per thread. It saves
// per row the softmax's shift and log-total, not the weights; the first-order backward recomputes each
// block's weights from them (flash-attention style) and under create_graph the same rules run as recorded
// ops, so the gradients are differentiable.
#include <tapegrad/framework/ops/attention.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/linalg.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/ops/softmax.h>

namespace tapegrad {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Where each (batch, head) block of the operands lies, and what is applied to its scores.
struct Plan {
  Shape batch;  // the broadcast leading dims of q, k and v
  std::int64_t blocks = 1, L = 0, S = 0, E = 0, Ev = 0;
  std::vector<std::int64_t> q_offset, k_offset, v_offset, mask_offset;  // element offset of block b
  std::int64_t mask_row_stride = 0, mask_col_stride = 0;                // 0 where the mask broadcasts
  bool has_mask = false, keep_mask = false, causal = false;
  double scale = 1.0, dropout_p = 0.0;
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

// The dropout draw of dropout(): element i of the [..., L, S] weights is dropped when its 32-bit half of
// 64-bit draw i / 2 is below p * 2^32. A stream walks the weights block by block, so forward and backward
// (from a copy of the generator taken before the forward drew) see the same mask.
class DropStream {
 public:
  DropStream(Generator& generator, double p) : engine_(generator.engine()), cut_(p * 4294967296.0) {}
  void next(unsigned char* keep, std::int64_t n) {
    for (std::int64_t j = 0; j < n; ++j, ++index_) {
      if ((index_ & 1) == 0) bits_ = engine_();
      const auto half = static_cast<double>((index_ & 1) ? bits_ >> 32 : bits_ & 0xffffffffu);
      keep[j] = half < cut_ ? 0 : 1;
    }
  }

 private:
  std::mt19937_64& engine_;
  double cut_;
  std::uint64_t bits_ = 0, index_ = 0;
};

// 1 / (1 - p), the scale of kept weights; 0 when p == 1 (every weight dropped), as dropout().
double kept_scale(double p) { return p == 1.0 ? 0.0 : 1.0 / (1.0 - p); }

// C = alpha op(A) op(B) + beta C that also takes empty extents (GEMM libraries differ on k == 0).
template <class T>
void product(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
             const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  kernels::gemm(ta, tb, m, n, k, alpha, a, std::max<std::int64_t>(lda, 1), b, std::max<std::int64_t>(ldb, 1), beta, c,
                std::max<std::int64_t>(ldc, 1));
}

// The scores of block b into w (L x S): q kᵀ · scale, plus the additive mask, or -inf where the keep-mask or
// the causal rule excludes an entry.
template <class T>
void scores(const Plan& p, std::int64_t b, const T* q, const T* k, const T* mask, T* w) {
  product(false, true, p.L, p.S, p.E, static_cast<T>(p.scale), q + p.q_offset[b], p.E, k + p.k_offset[b], p.E, T(0),
          w, p.S);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < p.L; ++r) {
    T* row = w + r * p.S;
    if (p.has_mask) {
      const T* m = mask + p.mask_offset[b] + r * p.mask_row_stride;
      for (std::int64_t c = 0; c < p.S; ++c) {
        const T value = m[c * p.mask_col_stride];
        if (!p.keep_mask) row[c] += value;
        else if (value == T(0)) row[c] = minus_inf;
      }
    }
    if (p.causal)
      for (std::int64_t c = r + 1; c < p.S; ++c) row[c] = minus_inf;
  }
}

// Note: an infinite row maximum (a row with every entry excluded) shifts by 0, as softmax does: the row's
// total is then 0 and its weights 0/0 = NaN, in the forward and in the recomputed backward alike.
template <class T>
T finite_shift(T m) {
  return std::isinf(m) ? T(0) : m;
}

// How many (batch, head) blocks run at once, and on how many threads: the blocks are independent, so they
// are split across the OpenMP threads (each with its own buffers), in rounds of a few blocks per thread whose
// dropout bytes are drawn first, in block order, so that the mask is the one a serial walk would draw.
struct Rounds {
  int threads = 1;
  std::int64_t size = 1;
};

Rounds rounds_for(const Plan& p, bool may_thread) {
  Rounds r;
  if (may_thread && p.blocks > 1 && detail::use_threads(p.blocks * p.L * p.S * std::max(p.E, p.Ev), 1 << 18)) {
    r.threads = omp_get_max_threads();
    r.size = std::min<std::int64_t>(p.blocks, 4 * static_cast<std::int64_t>(r.threads));
  }
  return r;
}

// Runs block(b, scratch index, keep bytes of b) for every block, round by round.
template <class Block>
void for_each_block(const Plan& p, const Rounds& rounds, std::optional<DropStream>& drops,
                    std::vector<unsigned char>& keep, Block block) {
  const std::int64_t n = p.L * p.S;
  for (std::int64_t first = 0; first < p.blocks; first += rounds.size) {
    const std::int64_t count = std::min(rounds.size, p.blocks - first);
    if (drops) drops->next(keep.data(), count * n);
    detail::parallel_for(count, rounds.threads > 1, [&](std::int64_t i) {
      block(first + i, omp_in_parallel() ? omp_get_thread_num() : 0, drops ? keep.data() + i * n : nullptr);
    });
  }
}

// One past the last entry of a row of scores that takes part (a causal or padding mask excludes a tail of
// -inf): the exponentials stop there, the rest of the row is 0. A row with no entry taking part is walked
// whole, so that it comes out NaN as before (see finite_shift).
template <class T>
std::int64_t live_end(const T* row, std::int64_t S) {
  std::int64_t end = S;
  while (end > 0 && row[end - 1] == -std::numeric_limits<T>::infinity()) --end;
  return end == 0 ? S : end;
}

template <class T>
void forward_kernel(const Plan& p, const T* q, const T* k, const T* v, const T* mask, Generator* generator, T* out,
                    T* row_shift, T* row_log_total) {
  const Rounds rounds = rounds_for(p, true);
  const auto n = static_cast<std::size_t>(p.L * p.S);
  std::vector<T> buffers(n * static_cast<std::size_t>(rounds.threads));
  std::vector<unsigned char> keep(p.dropout_p > 0 ? n * static_cast<std::size_t>(rounds.size) : 0);
  std::optional<DropStream> drops;
  if (generator) drops.emplace(*generator, p.dropout_p);
  const T kept = static_cast<T>(kept_scale(p.dropout_p));
  for_each_block(p, rounds, drops, keep, [&](std::int64_t b, int thread, const unsigned char* keep_b) {
    T* w = buffers.data() + static_cast<std::size_t>(thread) * n;
    scores(p, b, q, k, mask, w);
    for (std::int64_t r = 0; r < p.L; ++r) {
      T* row = w + r * p.S;
      const std::int64_t end = live_end(row, p.S);
      T m = -std::numeric_limits<T>::infinity(), total = 0;
      for (std::int64_t c = 0; c < end; ++c) m = std::max(m, row[c]);
      m = finite_shift(m);
      for (std::int64_t c = 0; c < end; ++c) total += (row[c] = std::exp(row[c] - m));
      for (std::int64_t c = 0; c < end; ++c) row[c] /= total;
      for (std::int64_t c = end; c < p.S; ++c) row[c] = T(0);
      row_shift[b * p.L + r] = m;
      row_log_total[b * p.L + r] = std::log(total);
    }
    if (keep_b)
      for (std::size_t j = 0; j < n; ++j) w[j] = w[j] * (keep_b[j] ? kept : T(0));
    product(false, false, p.L, p.Ev, p.S, T(1), w, p.S, v + p.v_offset[b], p.Ev, T(0), out + b * p.L * p.Ev, p.Ev);
  });
}

// True when no two blocks share an operand block (nothing broadcast), so their gradients can be written at once.
bool distinct_blocks(const std::vector<std::int64_t>& offsets) {
  for (std::size_t b = 1; b < offsets.size(); ++b)
    if (offsets[b] <= offsets[b - 1]) return false;
  return true;
}

// First-order backward, block by block, without recording. Per block it holds the weights P (recomputed from
// the saved shift and log-total), a second L x S buffer (P∘M for dv, then dP, then dS) and, with dropout, the
// block's keep bytes M. With D = rowsum(dP∘P): dS = P∘(dP - D), dq += scale dS k, dk += scale dSᵀ q,
// dv += (P∘M)ᵀ g, dmask += dS. Gradients of broadcast operands accumulate into their own blocks (beta = 1).
template <class T>
void backward_kernel(const Plan& p, const T* q, const T* k, const T* v, const T* mask, const T* g,
                     const T* row_shift, const T* row_log_total, Generator* generator, T* dq, T* dk, T* dv, T* dmask) {
  const bool disjoint = !dmask && distinct_blocks(p.q_offset) && distinct_blocks(p.k_offset) &&
                        distinct_blocks(p.v_offset);
  const Rounds rounds = rounds_for(p, disjoint);
  const auto n = static_cast<std::size_t>(p.L * p.S);
  std::vector<T> buffers(2 * n * static_cast<std::size_t>(rounds.threads));
  std::vector<unsigned char> keep(p.dropout_p > 0 ? n * static_cast<std::size_t>(rounds.size) : 0);
  std::optional<DropStream> drops;
  if (generator) drops.emplace(*generator, p.dropout_p);
  const T kept = static_cast<T>(kept_scale(p.dropout_p)), scale = static_cast<T>(p.scale);
  for_each_block(p, rounds, drops, keep, [&](std::int64_t b, int thread, const unsigned char* keep_b) {
    T* w = buffers.data() + 2 * n * static_cast<std::size_t>(thread);
    T* work = w + n;
    scores(p, b, q, k, mask, w);
    for (std::int64_t r = 0; r < p.L; ++r) {
      T* row = w + r * p.S;
      const std::int64_t end = live_end(row, p.S);
      const T shift = row_shift[b * p.L + r], log_total = row_log_total[b * p.L + r];
      for (std::int64_t c = 0; c < end; ++c) row[c] = std::exp((row[c] - shift) - log_total);
      for (std::int64_t c = end; c < p.S; ++c) row[c] = T(0);
    }
    const auto factor = [&](std::size_t j) { return keep_b ? (keep_b[j] ? kept : T(0)) : T(1); };
    const T* gb = g + b * p.L * p.Ev;
    if (dv) {
      for (std::size_t j = 0; j < n; ++j) work[j] = w[j] * factor(j);
      product(true, false, p.S, p.Ev, p.L, T(1), work, p.S, gb, p.Ev, T(1), dv + p.v_offset[b], p.Ev);
    }
    if (!dq && !dk && !dmask) return;
    product(false, true, p.L, p.S, p.Ev, T(1), gb, p.Ev, v + p.v_offset[b], p.Ev, T(0), work, p.S);
    for (std::int64_t r = 0; r < p.L; ++r) {
      T* d = work + r * p.S;
      const T* pr = w + r * p.S;
      T dot = 0;
      for (std::int64_t c = 0; c < p.S; ++c) dot += (d[c] *= factor(static_cast<std::size_t>(r * p.S + c))) * pr[c];
      for (std::int64_t c = 0; c < p.S; ++c) d[c] = pr[c] * (d[c] - dot);
      if (dmask) {
        T* m = dmask + p.mask_offset[b] + r * p.mask_row_stride;
        for (std::int64_t c = 0; c < p.S; ++c) m[c * p.mask_col_stride] += d[c];
      }
    }
    if (dq)
      product(false, false, p.L, p.E, p.S, scale, work, p.S, k + p.k_offset[b], p.E, T(1), dq + p.q_offset[b], p.E);
    if (dk)
      product(true, false, p.S, p.E, p.L, scale, work, p.S, q + p.q_offset[b], p.E, T(1), dk + p.k_offset[b], p.E);
  });
}

// The dropout factors of every weight, [batch..., L, S] (M = keep / (1 - p)), for the composed backward.
Tensor dropout_factors(const Plan& p, Generator generator, DType dtype) {
  Shape shape = p.batch;
  shape.push_back(p.L);
  shape.push_back(p.S);
  Tensor factors = empty(shape, dtype);
  std::vector<unsigned char> keep(static_cast<std::size_t>(factors.numel()));
  DropStream(generator, p.dropout_p).next(keep.data(), factors.numel());
  detail::dispatch_floating(dtype, kOp, [&](auto tag) {
    using T = decltype(tag);
    T* f = factors.data<T>();
    for (std::size_t j = 0; j < keep.size(); ++j) f[j] = keep[j] ? static_cast<T>(kept_scale(p.dropout_p)) : T(0);
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
  p.q_offset = block_offsets(q.shape(), p.batch);
  p.k_offset = block_offsets(k.shape(), p.batch);
  p.v_offset = block_offsets(v.shape(), p.batch);
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
    forward_kernel(p, qc.data<T>(), kc.data<T>(), vc.data<T>(), mc.defined() ? mc.data<T>() : nullptr,
                   p.dropout_p > 0 ? &generator : nullptr, out.data<T>(), row_shift.data<T>(),
                   row_log_total.data<T>());
  });
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
      std::vector<Tensor> grads(4);
      if (needs[0]) grads[0] = zeros(qv.shape(), TensorOptions{}.with_dtype(qv.dtype()));
      if (needs[1]) grads[1] = zeros(kv.shape(), TensorOptions{}.with_dtype(qv.dtype()));
      if (needs[2]) grads[2] = zeros(vv.shape(), TensorOptions{}.with_dtype(qv.dtype()));
      if (needs[3]) grads[3] = zeros(mv.shape(), TensorOptions{}.with_dtype(qv.dtype()));
      std::optional<Generator> stream = replay;  // a fresh copy: a retained graph may run backward again
      detail::dispatch_floating(qv.dtype(), kOp, [&](auto tag) {
        using T = decltype(tag);
        const auto out_ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
        backward_kernel(p, qv.data<T>(), kv.data<T>(), vv.data<T>(), mv.defined() ? mv.data<T>() : nullptr,
                        gv.data<T>(), sshift.get().data<T>(), slog.get().data<T>(), stream ? &*stream : nullptr,
                        out_ptr(grads[0]), out_ptr(grads[1]), out_ptr(grads[2]), out_ptr(grads[3]));
      });
      return grads;
    };
  });
}

}  // namespace tapegrad
