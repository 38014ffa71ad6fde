// Attention's block loops (kernels/attention.h). Per (batch, head) block: the scores by one GEMM into an L x S
// buffer, a max-shifted row softmax in place, dropout's bytes, and the second GEMM; the backward recomputes the
// weights from each row's saved shift and log-total (flash-attention style) and runs three to four GEMMs more.
// Note: the float32 row passes are dispatched vector loops with their own exp (the exp of vector_math.cpp's
// sigmoid, for arguments <= 0): glibc's scalar expf and the scalar loops around it were 20 % of a Transformer
// training step, more than the attention GEMMs (2026-12-07 profile). float64 keeps libm and the scalar order.
#include <tapegrad/framework/kernels/attention.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/dispatch.h>
#include <tapegrad/framework/kernels/dropout_mask.h>
#include <tapegrad/framework/kernels/exp_reduced.h>
#include <tapegrad/framework/kernels/gemm.h>

namespace tapegrad::kernels {

namespace {

// exp(-|a|) in float32: kernels/exp_reduced.h, as the LSTM's sigmoid computes it.
[[gnu::always_inline]] inline float exp_minus(float a) { return exp_reduced::exp_minus_magnitude(a); }

// ---- row passes ----

// Note: an infinite row maximum (a row with every entry excluded) shifts by 0, as softmax does: the row's
// total is then 0 and its weights 0/0 = NaN, in the forward and in the recomputed backward alike.
template <class T>
T finite_shift(T m) {
  return std::isinf(m) ? T(0) : m;
}

// One past the last entry of a row of scores that takes part (a causal or padding mask excludes a tail of
// -inf): the exponentials stop there, the rest of the row is 0. A row with no entry taking part is walked
// whole, so that it comes out NaN (see finite_shift).
template <class T>
std::int64_t live_end(const T* row, std::int64_t S) {
  std::int64_t end = S;
  while (end > 0 && row[end - 1] == -std::numeric_limits<T>::infinity()) --end;
  return end == 0 ? S : end;
}

template <class T>
void softmax_row_scalar(std::int64_t end, std::int64_t S, T* row, T* shift, T* log_total) {
  T m = -std::numeric_limits<T>::infinity(), total = 0;
  for (std::int64_t c = 0; c < end; ++c) m = std::max(m, row[c]);
  m = finite_shift(m);
  for (std::int64_t c = 0; c < end; ++c) total += (row[c] = std::exp(row[c] - m));
  for (std::int64_t c = 0; c < end; ++c) row[c] /= total;
  for (std::int64_t c = end; c < S; ++c) row[c] = T(0);
  *shift = m;
  *log_total = std::log(total);
}

template <class T>
void recompute_row_scalar(std::int64_t end, std::int64_t S, T* row, T shift, T log_total) {
  for (std::int64_t c = 0; c < end; ++c) row[c] = std::exp((row[c] - shift) - log_total);
  for (std::int64_t c = end; c < S; ++c) row[c] = T(0);
}

// The softmax of each row of the L x S scores in place, its shift and log-total.
void softmax_rows(std::int64_t L, std::int64_t S, double* w, double* shift, double* log_total) {
  for (std::int64_t r = 0; r < L; ++r)
    softmax_row_scalar(live_end(w + r * S, S), S, w + r * S, shift + r, log_total + r);
}

TAPEGRAD_DISPATCH
void softmax_rows(std::int64_t L, std::int64_t S, float* w, float* shift, float* log_total) {
  for (std::int64_t r = 0; r < L; ++r) {
    float* row = w + r * S;
    const std::int64_t end = live_end(row, S);
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (std::int64_t c = 0; c < end; ++c) m = std::max(m, row[c]);
    // Note: an infinite maximum (or a NaN the reduction met) takes the scalar path, whose exp arguments may be > 0.
    if (!(std::abs(m) < std::numeric_limits<float>::infinity())) {
      softmax_row_scalar(end, S, row, shift + r, log_total + r);
      continue;
    }
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (std::int64_t c = 0; c < end; ++c) {
      const float e = exp_minus(m - row[c]);
      row[c] = e;
      total += e;
    }
#pragma omp simd
    for (std::int64_t c = 0; c < end; ++c) row[c] /= total;
    for (std::int64_t c = end; c < S; ++c) row[c] = 0.0f;
    shift[r] = m;
    log_total[r] = std::log(total);
  }
}

// The weights again from the scores: exp((s - shift) - log_total), 0 past each row's live end.
void recompute_rows(std::int64_t L, std::int64_t S, double* w, const double* shift, const double* log_total) {
  for (std::int64_t r = 0; r < L; ++r) recompute_row_scalar(live_end(w + r * S, S), S, w + r * S, shift[r], log_total[r]);
}

TAPEGRAD_DISPATCH
void recompute_rows(std::int64_t L, std::int64_t S, float* w, const float* shift, const float* log_total) {
  for (std::int64_t r = 0; r < L; ++r) {
    float* row = w + r * S;
    const std::int64_t end = live_end(row, S);
    const float sh = shift[r], lt = log_total[r];
    float largest = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : largest)
    for (std::int64_t c = 0; c < end; ++c) largest = std::max(largest, (row[c] - sh) - lt);
    if (largest > 0.0f) {  // only after an infinite forward maximum: exp of positive arguments
      recompute_row_scalar(end, S, row, sh, lt);
      continue;
    }
#pragma omp simd
    for (std::int64_t c = 0; c < end; ++c) row[c] = exp_minus(-((row[c] - sh) - lt));
    for (std::int64_t c = end; c < S; ++c) row[c] = 0.0f;
  }
}

// dS = P ∘ (dP∘M - rowsum(dP∘M∘P)) in place of dP, M the dropout factors (none: 1).
template <class T>
[[gnu::always_inline]] inline void softmax_grad_rows_body(std::int64_t L, std::int64_t S, T* d, const T* w,
                                                          const unsigned char* keep, T kept) {
  for (std::int64_t r = 0; r < L; ++r) {
    T* dr = d + r * S;
    const T* pr = w + r * S;
    T dot = 0;
    if (keep) {
      const unsigned char* kr = keep + r * S;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t c = 0; c < S; ++c) {
        dr[c] *= kr[c] ? kept : T(0);
        dot += dr[c] * pr[c];
      }
    } else {
#pragma omp simd reduction(+ : dot)
      for (std::int64_t c = 0; c < S; ++c) dot += dr[c] * pr[c];
    }
#pragma omp simd
    for (std::int64_t c = 0; c < S; ++c) dr[c] = pr[c] * (dr[c] - dot);
  }
}

TAPEGRAD_DISPATCH
void softmax_grad_rows(std::int64_t L, std::int64_t S, float* d, const float* w, const unsigned char* keep, float kept) {
  softmax_grad_rows_body(L, S, d, w, keep, kept);
}

// Note: float64 keeps the scalar sums (the order its 1e-10 agreement with PyTorch was measured in).
void softmax_grad_rows(std::int64_t L, std::int64_t S, double* d, const double* w, const unsigned char* keep,
                       double kept) {
  for (std::int64_t r = 0; r < L; ++r) {
    double* dr = d + r * S;
    const double* pr = w + r * S;
    double dot = 0;
    for (std::int64_t c = 0; c < S; ++c) dot += (dr[c] *= keep ? (keep[r * S + c] ? kept : 0.0) : 1.0) * pr[c];
    for (std::int64_t c = 0; c < S; ++c) dr[c] = pr[c] * (dr[c] - dot);
  }
}

// ---- blocks ----

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
  gemm(ta, tb, m, n, k, alpha, a, std::max<std::int64_t>(lda, 1), b, std::max<std::int64_t>(ldb, 1), beta, c,
       std::max<std::int64_t>(ldc, 1));
}

// The scores of block b into w (L x S): q kᵀ · scale, plus the additive mask, or -inf where the keep-mask or
// the causal rule excludes an entry.
template <class T>
void scores(const AttentionPlan& p, std::int64_t b, const T* q, const T* k, const T* mask, T* w) {
  product(false, true, p.L, p.S, p.E, static_cast<T>(p.scale), q + p.q.offset[b], p.q.ld, k + p.k.offset[b], p.k.ld,
          T(0), w, p.S);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < p.L; ++r) {
    T* row = w + r * p.S;
    if (p.has_mask) {
      const T* m = mask + p.mask_offset[b] + r * p.mask_row_stride;
      if (!p.keep_mask && p.mask_col_stride == 1) {
        for (std::int64_t c = 0; c < p.S; ++c) row[c] += m[c];
      } else {
        for (std::int64_t c = 0; c < p.S; ++c) {
          const T value = m[c * p.mask_col_stride];
          if (!p.keep_mask) row[c] += value;
          else if (value == T(0)) row[c] = minus_inf;
        }
      }
    }
    if (p.causal)
      for (std::int64_t c = r + 1; c < p.S; ++c) row[c] = minus_inf;
  }
}

// How many (batch, head) blocks run at once, and on how many threads: the blocks are independent, so they
// are split across the OpenMP threads (each with its own buffers), in rounds of a few blocks per thread whose
// dropout bytes are drawn first, in block order, so that the mask is the one a serial walk would draw.
struct Rounds {
  int threads = 1;
  std::int64_t size = 1;
};

Rounds rounds_for(const AttentionPlan& p, bool may_thread) {
  Rounds r;
  if (may_thread && p.blocks > 1 && detail::use_threads(p.blocks * p.L * p.S * std::max(p.E, p.Ev), 1 << 18)) {
    r.threads = omp_get_max_threads();
    r.size = std::min<std::int64_t>(p.blocks, 4 * static_cast<std::int64_t>(r.threads));
  }
  return r;
}

// Runs block(b, scratch index, keep bytes of b) for every block, round by round: the keep bytes are the whole
// mask's (`all_keep`, blocks * L * S), or those of each round drawn from `drops` before it, or none.
template <class Block>
void for_each_block(const AttentionPlan& p, const Rounds& rounds, std::optional<DropoutStream>& drops,
                    const unsigned char* all_keep, std::vector<unsigned char>& keep, Block block) {
  const std::int64_t n = p.L * p.S;
  for (std::int64_t first = 0; first < p.blocks; first += rounds.size) {
    const std::int64_t count = std::min(rounds.size, p.blocks - first);
    if (drops && !all_keep) drops->next(keep.data(), count * n);
    detail::parallel_for(count, rounds.threads > 1, [&](std::int64_t i) {
      const unsigned char* keep_b = all_keep ? all_keep + (first + i) * n : (drops ? keep.data() + i * n : nullptr);
      block(first + i, omp_in_parallel() ? omp_get_thread_num() : 0, keep_b);
    });
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionPlan& p, const T* q, const T* k, const T* v, const T* mask, Generator* generator,
                       unsigned char* keep_out, T* out, T* row_shift, T* row_log_total) {
  const Rounds rounds = rounds_for(p, true);
  const auto n = static_cast<std::size_t>(p.L * p.S);
  std::vector<T> buffers(n * static_cast<std::size_t>(rounds.threads));
  std::vector<unsigned char> keep(generator && !keep_out ? n * static_cast<std::size_t>(rounds.size) : 0);
  std::optional<DropoutStream> drops;
  if (generator) drops.emplace(*generator, p.dropout_p);
  if (generator && keep_out) drops->next(keep_out, p.blocks * static_cast<std::int64_t>(n));
  const T kept = static_cast<T>(kept_scale(p.dropout_p));
  for_each_block(p, rounds, drops, generator ? keep_out : nullptr, keep,
                 [&](std::int64_t b, int thread, const unsigned char* keep_b) {
    T* w = buffers.data() + static_cast<std::size_t>(thread) * n;
    scores(p, b, q, k, mask, w);
    softmax_rows(p.L, p.S, w, row_shift + b * p.L, row_log_total + b * p.L);
    if (keep_b) apply_keep(static_cast<std::int64_t>(n), w, keep_b, kept, w);
    product(false, false, p.L, p.Ev, p.S, T(1), w, p.S, v + p.v.offset[b], p.v.ld, T(0), out + p.out.offset[b],
            p.out.ld);
  });
}

// Per block it holds the weights P (recomputed from the saved shift and log-total), a second L x S buffer (P∘M
// for dv, then dP, then dS) and, with dropout, the block's keep bytes M. With D = rowsum(dP∘M∘P):
// dS = P∘(dP∘M - D), dq += scale dS k, dk += scale dSᵀ q, dv += (P∘M)ᵀ g, dmask += dS.
template <class T>
void attention_backward(const AttentionPlan& p, const T* q, const T* k, const T* v, const T* mask, const T* g,
                        const T* row_shift, const T* row_log_total, const unsigned char* saved_keep,
                        Generator* generator, const AttentionGradients<T>& grads) {
  const Rounds rounds = rounds_for(p, grads.disjoint);
  const auto n = static_cast<std::size_t>(p.L * p.S);
  std::vector<T> buffers(2 * n * static_cast<std::size_t>(rounds.threads));
  std::vector<unsigned char> keep(generator && !saved_keep ? n * static_cast<std::size_t>(rounds.size) : 0);
  std::optional<DropoutStream> drops;
  if (generator && !saved_keep) drops.emplace(*generator, p.dropout_p);
  const T kept = static_cast<T>(kept_scale(p.dropout_p)), scale = static_cast<T>(p.scale);
  const T beta = grads.overwrite ? T(0) : T(1);
  for_each_block(p, rounds, drops, saved_keep, keep, [&](std::int64_t b, int thread, const unsigned char* keep_b) {
    T* w = buffers.data() + 2 * n * static_cast<std::size_t>(thread);
    T* work = w + n;
    scores(p, b, q, k, mask, w);
    recompute_rows(p.L, p.S, w, row_shift + b * p.L, row_log_total + b * p.L);
    const T* gb = g + p.out.offset[b];
    if (grads.dv) {
      const T* weights = w;
      if (keep_b) {
        apply_keep(static_cast<std::int64_t>(n), w, keep_b, kept, work);
        weights = work;
      }
      product(true, false, p.S, p.Ev, p.L, T(1), weights, p.S, gb, p.out.ld, beta, grads.dv + grads.dv_layout.offset[b],
              grads.dv_layout.ld);
    }
    if (!grads.dq && !grads.dk && !grads.dmask) return;
    product(false, true, p.L, p.S, p.Ev, T(1), gb, p.out.ld, v + p.v.offset[b], p.v.ld, T(0), work, p.S);
    softmax_grad_rows(p.L, p.S, work, w, keep_b, kept);
    if (grads.dmask)
      for (std::int64_t r = 0; r < p.L; ++r) {
        T* m = grads.dmask + p.mask_offset[b] + r * p.mask_row_stride;
        for (std::int64_t c = 0; c < p.S; ++c) m[c * p.mask_col_stride] += work[r * p.S + c];
      }
    if (grads.dq)
      product(false, false, p.L, p.E, p.S, scale, work, p.S, k + p.k.offset[b], p.k.ld, beta,
              grads.dq + grads.dq_layout.offset[b], grads.dq_layout.ld);
    if (grads.dk)
      product(true, false, p.S, p.E, p.L, scale, work, p.S, q + p.q.offset[b], p.q.ld, beta,
              grads.dk + grads.dk_layout.offset[b], grads.dk_layout.ld);
  });
}

template void attention_forward<float>(const AttentionPlan&, const float*, const float*, const float*, const float*,
                                       Generator*, unsigned char*, float*, float*, float*);
template void attention_forward<double>(const AttentionPlan&, const double*, const double*, const double*,
                                        const double*, Generator*, unsigned char*, double*, double*, double*);
template void attention_backward<float>(const AttentionPlan&, const float*, const float*, const float*, const float*,
                                        const float*, const float*, const float*, const unsigned char*, Generator*,
                                        const AttentionGradients<float>&);
template void attention_backward<double>(const AttentionPlan&, const double*, const double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         const unsigned char*, Generator*, const AttentionGradients<double>&);

}  // namespace tapegrad::kernels
