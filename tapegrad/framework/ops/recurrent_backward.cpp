// Backpropagation through time for recurrent_sequence (ops/recurrent.h): one reverse pass over the steps, each a
// fused pointwise pass through the gates and one GEMM back through W_hh; then the weight gradients as single
// GEMMs over all steps (the per-step gate gradients are kept in [T, B, G*H] for that).
#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/framework/kernels/column_sums.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/ops/detail/recurrent_steps.h>

namespace tapegrad::detail {

template <class S>
void recurrent_backward(const RecurrentBuffers<S>& b, const S* grad_output, const S* grad_c_n,
                        const RecurrentGradients<S>& grads) {
  const std::int64_t T = b.steps, B = b.batch, H = b.hidden, P = b.state, GH = b.gates;
  const bool gru = b.kind == RecurrentKind::GRU, lstm = b.kind == RecurrentKind::LSTM;
  const bool threaded = use_threads(B * H, kGateParallel);
  // Gradients of the gates' pre-activations: from the input side (d_x, the op's input_projection gradient) and
  // from the hidden side (d_hidden, of h W_hh^T + b_hh). They differ only in GRU's n gate, where the hidden part
  // is multiplied by r.
  S* d_x = grads.input_projection;
  std::vector<S> hidden_storage(gru ? static_cast<std::size_t>(T * B * GH) : 0);
  S* d_hidden = gru ? hidden_storage.data() : d_x;
  std::vector<S> d_state(static_cast<std::size_t>(B * P), S(0)), d_h(static_cast<std::size_t>(B * P));
  std::vector<S> d_cell(lstm ? static_cast<std::size_t>(B * H) : 0), d_u(b.unprojected ? static_cast<std::size_t>(B * H) : 0);
  std::vector<S> d_projected(b.unprojected ? static_cast<std::size_t>(T * B * P) : 0);
  if (lstm)
    for (std::int64_t k = 0; k < B * H; ++k) d_cell[k] = grad_c_n ? grad_c_n[k] : S(0);

  for (std::int64_t s = T - 1; s >= 0; --s) {
    const std::int64_t t = b.time(s);
    const S* g_out = grad_output + t * B * P;
    for (std::int64_t k = 0; k < B * P; ++k) d_h[k] = g_out[k] + d_state[k];
    const S* h_prev = s == 0 ? b.h0 : b.output + b.time(s - 1) * B * P;
    S* dx = d_x + t * B * GH;
    S* dh_side = d_hidden + t * B * GH;
    switch (b.kind) {
      case RecurrentKind::RNNTanh:
      case RecurrentKind::RNNReLU: {
        const S* h = b.output + t * B * P;
        const bool relu = b.kind == RecurrentKind::RNNReLU;
        for (std::int64_t k = 0; k < B * H; ++k)
          dx[k] = relu ? (h[k] > S(0) ? d_h[k] : S(0)) : d_h[k] * (S(1) - h[k] * h[k]);
        break;
      }
      case RecurrentKind::LSTM: {
        const S* du = d_h.data();
        if (b.unprojected) {  // h = u W_hr^T: d_u = d_h W_hr, and d_h is kept for W_hr's gradient
          std::copy(d_h.begin(), d_h.end(), d_projected.begin() + t * B * P);
          kernels::gemm(false, false, B, H, P, S(1), d_h.data(), P, b.weight_hr, H, S(0), d_u.data(), H);
          du = d_u.data();
        }
        const S* act = b.activations + t * B * GH;
        const S* c_prev = b.cells + s * B * H;
        const S* c = b.cells + (s + 1) * B * H;
        parallel_for(B, threaded, [&](std::int64_t n) {
          for (std::int64_t j = 0; j < H; ++j) {
            const std::int64_t k = n * GH + j, m = n * H + j;
            const S i = act[k], f = act[k + H], g = act[k + 2 * H], o = act[k + 3 * H];
            const S tc = std::tanh(c[m]);
            const S dc = d_cell[m] + du[m] * o * (S(1) - tc * tc);
            dx[k] = dc * g * i * (S(1) - i);
            dx[k + H] = dc * c_prev[m] * f * (S(1) - f);
            dx[k + 2 * H] = dc * i * (S(1) - g * g);
            dx[k + 3 * H] = du[m] * tc * o * (S(1) - o);
            d_cell[m] = dc * f;
          }
        });
        break;
      }
      case RecurrentKind::GRU: {
        const S* act = b.activations + t * B * GH;
        const S* hidden_n = b.hidden_n + t * B * H;
        parallel_for(B, threaded, [&](std::int64_t n) {
          for (std::int64_t j = 0; j < H; ++j) {
            const std::int64_t k = n * GH + j, m = n * H + j;
            const S r = act[k], z = act[k + H], cand = act[k + 2 * H];
            const S dh = d_h[m];
            const S d_cand = dh * (S(1) - z) * (S(1) - cand * cand);
            const S d_r = d_cand * hidden_n[m] * r * (S(1) - r);
            const S d_z = dh * (h_prev[m] - cand) * z * (S(1) - z);
            dx[k] = d_r, dx[k + H] = d_z, dx[k + 2 * H] = d_cand;
            dh_side[k] = d_r, dh_side[k + H] = d_z, dh_side[k + 2 * H] = d_cand * r;
            d_state[m] = dh * z;  // the direct path h' = ... + z * h; the GEMM below adds onto it
          }
        });
        break;
      }
    }
    kernels::gemm(false, false, B, P, GH, S(1), dh_side, GH, b.weight_hh, P, gru ? S(1) : S(0), d_state.data(), P);
  }

  if (grads.h0) std::copy(d_state.begin(), d_state.end(), grads.h0);
  if (grads.c0) std::copy(d_cell.begin(), d_cell.end(), grads.c0);
  if (grads.weight_hh) {
    // Sum over steps s of d_hidden[time(s)]^T h_prev(s): steps 1.. pair with the outputs one step behind, which
    // lie contiguously in time order; step 0 pairs with h0.
    S beta = S(0);
    if (T > 1) {
      const S* dh_rows = b.reverse ? d_hidden : d_hidden + B * GH;
      const S* h_rows = b.reverse ? b.output + B * P : b.output;
      kernels::gemm(true, false, GH, P, (T - 1) * B, S(1), dh_rows, GH, h_rows, P, S(0), grads.weight_hh, P);
      beta = S(1);
    }
    kernels::gemm(true, false, GH, P, B, S(1), d_hidden + b.time(0) * B * GH, GH, b.h0, P, beta, grads.weight_hh, P);
  }
  if (grads.bias_hh) kernels::column_sums(T * B, GH, d_hidden, grads.bias_hh);
  if (grads.weight_hr)
    kernels::gemm(true, false, P, H, T * B, S(1), d_projected.data(), P, b.unprojected, H, S(0), grads.weight_hr, H);
}

template void recurrent_backward<float>(const RecurrentBuffers<float>&, const float*, const float*,
                                        const RecurrentGradients<float>&);
template void recurrent_backward<double>(const RecurrentBuffers<double>&, const double*, const double*,
                                         const RecurrentGradients<double>&);

}  // namespace tapegrad::detail
