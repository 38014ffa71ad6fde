#pragma once
// Internal: the raw loops of recurrent_sequence (ops/recurrent.h), forward in recurrent.cpp and backpropagation
// through time in recurrent_backward.cpp. Everything is row-major and contiguous: step t of a [T, B, X] buffer
// starts at t * B * X.
#include <cstdint>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/ops/recurrent.h>

namespace tapegrad::detail {

/// A gate pass splits its batch rows across the OpenMP threads from this many elements (B * H) on. Note: each
/// element costs a few transcendental functions (tens of nanoseconds), so splitting pays far below the plain
/// elementwise threshold; a 2-layer LSTM(28, 256) at batch 128 spent about 40 % of a training step in them.
inline constexpr std::int64_t kGateParallel = std::int64_t{1} << 12;

/// Extents and raw pointers of one layer-direction. Null where the kind or options have no such tensor.
template <class S>
struct RecurrentBuffers {
  RecurrentKind kind;
  std::int64_t steps, batch, hidden, state;  // T, B, H, P (P = H without projection)
  std::int64_t gates;                        // G * H
  bool reverse;
  const S* weight_hh;  // [G*H, P]
  const S* bias_hh;    // [G*H]
  const S* weight_hr;  // [P, H]
  const S* h0;         // [B, P]
  // Saved by the forward for the backward:
  S* output;       // [T, B, P] (LSTM: followed by c_n [B, H] in the same storage)
  S* activations;  // [T, B, G*H]: RNN h; LSTM i, f, g, o; GRU r, z, n (post-activation)
  S* cells;        // LSTM [T + 1, B, H]: c0, c_1 ... c_T in processing order
  S* hidden_n;     // GRU [T, B, H]: W_hn h + b_hn
  S* unprojected;  // LSTM with projection [T, B, H]: o * tanh(c)
  /// The time index of processing step s.
  std::int64_t time(std::int64_t s) const { return reverse ? steps - 1 - s : s; }
};

template <class S>
void recurrent_forward(RecurrentBuffers<S>& b, const S* input_projection, const S* c0);

/// Gradients out (null when not wanted): the input projection's [T, B, G*H] (always computed), weight_hh,
/// bias_hh, h0, c0, weight_hr. `grad_output` is [T, B, P]; `grad_c_n` [B, H] for LSTM (or null).
template <class S>
struct RecurrentGradients {
  S* input_projection;
  S* weight_hh;
  S* bias_hh;
  S* h0;
  S* c0;
  S* weight_hr;
};

template <class S>
void recurrent_backward(const RecurrentBuffers<S>& b, const S* grad_output, const S* grad_c_n,
                        const RecurrentGradients<S>& grads);

}  // namespace tapegrad::detail
