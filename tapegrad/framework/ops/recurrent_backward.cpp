// Backpropagation through time for recurrent_sequence (ops/recurrent.h): one reverse pass over the steps, each a
// fused pointwise pass through the gates and one GEMM back through W_hh; then the weight gradients as single
// GEMMs over all steps (the per-step gate gradients are kept in [T, B, G*H] for that).
#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/framework/kernels/column_sums.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/kernels/vector_math.h>
#include <tapegrad/framework/ops/detail/recurrent_steps.h>

namespace tapegrad::detail {

template <class S>
void recurrent_backward(const RecurrentBuffers<S>& b, const S* grad_output, const S* grad_h_n, const S* grad_c_n,
                        const RecurrentGradients<S>& grads) {
  const std::int64_t T = b.steps, B = b.batch, H = b.hidden, P = b.state, GH = b.gates, N = b.total_rows();
  const bool gru = b.kind == RecurrentKind::GRU, lstm = b.kind == RecurrentKind::LSTM;
  // Gradients of the gates' pre-activations: from the input side (d_x, the op's input_projection gradient) and
  // from the hidden side (d_hidden, of h W_hh^T + b_hh). They differ only in GRU's n gate, where the hidden part
  // is multiplied by r.
  S* d_x = grads.input_projection;
  std::vector<S> hidden_storage(gru ? static_cast<std::size_t>(N * GH) : 0);
  S* d_hidden = gru ? hidden_storage.data() : d_x;
  // d_state / d_cell: per row, the gradient of the state the row's next processed step (or h_n / c_n) reads.
  std::vector<S> d_state(static_cast<std::size_t>(B * P), S(0)), d_h(static_cast<std::size_t>(B * P));
  std::vector<S> d_cell(lstm ? static_cast<std::size_t>(B * H) : 0), d_u(b.unprojected ? static_cast<std::size_t>(B * H) : 0);
  std::vector<S> d_projected(b.unprojected ? static_cast<std::size_t>(N * P) : 0);
  if (grad_h_n) std::copy(grad_h_n, grad_h_n + B * P, d_state.begin());
  if (lstm)
    for (std::int64_t k = 0; k < B * H; ++k) d_cell[k] = grad_c_n ? grad_c_n[k] : S(0);
  // The state row n of step s read: the previous step's output, or h0 for a row that starts there.
  auto previous_row = [&](std::int64_t s, std::int64_t n) {
    return n < b.continuing(s) ? b.output + (b.offset(b.time(s - 1)) + n) * P : b.h0 + n * P;
  };

  for (std::int64_t s = T - 1; s >= 0; --s) {
    const std::int64_t t = b.time(s), rows = b.rows(s), cont = b.continuing(s);
    const bool threaded = use_threads(rows * H, kGateParallel);
    const S* g_out = grad_output + b.offset(t) * P;
    for (std::int64_t k = 0; k < rows * P; ++k) d_h[k] = g_out[k] + d_state[k];
    S* dx = d_x + b.offset(t) * GH;
    S* dh_side = d_hidden + b.offset(t) * GH;
    switch (b.kind) {
      case RecurrentKind::RNNTanh:
      case RecurrentKind::RNNReLU: {
        const S* h = b.output + b.offset(t) * P;
        const bool relu = b.kind == RecurrentKind::RNNReLU;
        for (std::int64_t k = 0; k < rows * H; ++k)
          dx[k] = relu ? (h[k] > S(0) ? d_h[k] : S(0)) : d_h[k] * (S(1) - h[k] * h[k]);
        break;
      }
      case RecurrentKind::LSTM: {
        const S* du = d_h.data();
        if (b.unprojected) {  // h = u W_hr^T: d_u = d_h W_hr, and d_h is kept for W_hr's gradient
          std::copy(d_h.begin(), d_h.begin() + rows * P, d_projected.begin() + b.offset(t) * P);
          kernels::gemm(false, false, rows, H, P, S(1), d_h.data(), P, b.weight_hr, H, S(0), d_u.data(), H);
          du = d_u.data();
        }
        const S* act = b.activations + b.offset(t) * GH;
        const S* c_prev = s == 0 ? b.cells : b.cells + (B + b.offset(b.time(s - 1))) * H;
        const S* c_tanh = b.cell_tanh + b.offset(t) * H;  // the forward's tanh(c), not evaluated again
        parallel_for(rows, threaded, [&](std::int64_t n) {
          const S* cp = n < cont ? c_prev + n * H : b.cells + n * H;  // a starting row's c_prev is its c0
          kernels::lstm_cell_backward(H, act + n * GH, cp, c_tanh + n * H, du + n * H, d_cell.data() + n * H,
                                      dx + n * GH);
        });
        break;
      }
      case RecurrentKind::GRU: {
        const S* act = b.activations + b.offset(t) * GH;
        const S* hidden_n = b.hidden_n + b.offset(t) * H;
        parallel_for(rows, threaded, [&](std::int64_t n) {
          const S* h_prev = previous_row(s, n);
          for (std::int64_t j = 0; j < H; ++j) {
            const std::int64_t k = n * GH + j, m = n * H + j;
            const S r = act[k], z = act[k + H], cand = act[k + 2 * H];
            const S dh = d_h[m];
            const S d_cand = dh * (S(1) - z) * (S(1) - cand * cand);
            const S d_r = d_cand * hidden_n[m] * r * (S(1) - r);
            const S d_z = dh * (h_prev[j] - cand) * z * (S(1) - z);
            dx[k] = d_r, dx[k + H] = d_z, dx[k + 2 * H] = d_cand;
            dh_side[k] = d_r, dh_side[k + H] = d_z, dh_side[k + 2 * H] = d_cand * r;
            d_state[m] = dh * z;  // the direct path h' = ... + z * h; the GEMM below adds onto it
          }
        });
        break;
      }
    }
    kernels::gemm(false, false, rows, P, GH, S(1), dh_side, GH, b.weight_hh, P, gru ? S(1) : S(0), d_state.data(), P);
    // Rows that started from h0 / c0 at this step hand their state gradients over (each row does once).
    if (grads.h0) std::copy(d_state.begin() + cont * P, d_state.begin() + rows * P, grads.h0 + cont * P);
    if (grads.c0) std::copy(d_cell.begin() + cont * H, d_cell.begin() + rows * H, grads.c0 + cont * H);
  }

  if (grads.weight_hh) {
    if (!b.batch_sizes) {
      // Sum over steps s of d_hidden[time(s)]^T h_prev(s): steps 1.. pair with the outputs one step behind,
      // which lie contiguously in time order; step 0 pairs with h0.
      S beta = S(0);
      if (T > 1) {
        const S* dh_rows = b.reverse ? d_hidden : d_hidden + B * GH;
        const S* h_rows = b.reverse ? b.output + B * P : b.output;
        kernels::gemm(true, false, GH, P, (T - 1) * B, S(1), dh_rows, GH, h_rows, P, S(0), grads.weight_hh, P);
        beta = S(1);
      }
      kernels::gemm(true, false, GH, P, B, S(1), d_hidden + b.time(0) * B * GH, GH, b.h0, P, beta, grads.weight_hh, P);
    } else {
      // Packed: the previous states gathered into d_hidden's layout (a copy of N * P), then one GEMM.
      std::vector<S> previous(static_cast<std::size_t>(N * P));
      for (std::int64_t s = 0; s < T; ++s)
        for (std::int64_t n = 0; n < b.rows(s); ++n) {
          const S* h = previous_row(s, n);
          std::copy(h, h + P, previous.begin() + (b.offset(b.time(s)) + n) * P);
        }
      kernels::gemm(true, false, GH, P, N, S(1), d_hidden, GH, previous.data(), P, S(0), grads.weight_hh, P);
    }
  }
  if (grads.bias_hh) kernels::column_sums(N, GH, d_hidden, grads.bias_hh);
  if (grads.weight_hr)
    kernels::gemm(true, false, P, H, N, S(1), d_projected.data(), P, b.unprojected, H, S(0), grads.weight_hr, H);
}

template void recurrent_backward<float>(const RecurrentBuffers<float>&, const float*, const float*, const float*,
                                        const RecurrentGradients<float>&);
template void recurrent_backward<double>(const RecurrentBuffers<double>&, const double*, const double*,
                                         const double*, const RecurrentGradients<double>&);

}  // namespace tapegrad::detail
