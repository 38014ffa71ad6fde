#pragma once
// Internal: the raw loops of recurrent_sequence (ops/recurrent.h), forward in recurrent.cpp and backpropagation
// through time in recurrent_backward.cpp. Everything is row-major and contiguous, in the time-major packed layout
// of PackedSequence: time step t holds rows(t) rows (batch_sizes[t], non-increasing in t; all B when padded)
// starting at row offset(t) (t * B when padded), so a padded [T, B, X] buffer is the special case.
#include <algorithm>
#include <cstdint>

#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/ops/recurrent.h>

namespace tapegrad::detail {

/// A gate pass splits its batch rows across the OpenMP threads from this many elements (B * H) on. Note: each
/// element costs a few transcendental functions (a few nanoseconds in kernels/vector_math.h's vector loops; tens
/// with libm's, which float64 still uses), so splitting pays far below the plain elementwise threshold.
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
  S* output;       // [N, P] (followed by h_n [B, P] and, LSTM, c_n [B, H] in the same storage)
  S* activations;  // [N, G*H]: RNN h; LSTM i, f, g, o; GRU r, z, n (post-activation)
  S* cells;        // LSTM [B + N, H]: c0, then every step's c in the time layout of output
  S* hidden_n;     // GRU [N, H]: W_hn h + b_hn
  S* unprojected;  // LSTM with projection [N, H]: o * tanh(c)
  S* cell_tanh;    // LSTM [N, H]: tanh(c), so that the backward does not evaluate it again
  // Packed sequences: the rows of each time step (descending) and their row offsets, both [T]; null: padded.
  const std::int64_t* batch_sizes = nullptr;
  const std::int64_t* offsets = nullptr;
  /// The time index of processing step s.
  std::int64_t time(std::int64_t s) const { return reverse ? steps - 1 - s : s; }
  /// The rows of time step t and its first row.
  std::int64_t rows_at(std::int64_t t) const { return batch_sizes ? batch_sizes[t] : batch; }
  std::int64_t offset(std::int64_t t) const { return offsets ? offsets[t] : t * batch; }
  /// The rows of processing step s.
  std::int64_t rows(std::int64_t s) const { return rows_at(time(s)); }
  /// How many of step s's rows continue from step s - 1; the rest (only in reverse, where shorter sequences
  /// join late) start from h0 / c0, as each sequence's own last time step is its first reverse step.
  std::int64_t continuing(std::int64_t s) const { return s == 0 ? 0 : std::min(rows(s - 1), rows(s)); }
  /// All rows (N = sum of batch_sizes).
  std::int64_t total_rows() const { return offset(steps - 1) + rows_at(steps - 1); }
};

/// Writes output, the saved buffers, and each row's final states h_n [B, P] and c_n [B, H] (each: null for none).
template <class S>
void recurrent_forward(RecurrentBuffers<S>& b, const S* input_projection, const S* c0, S* h_n, S* c_n);

/// Gradients out (null when not wanted): the input projection's [N, G*H] (always computed), weight_hh,
/// bias_hh, h0, c0, weight_hr. `grad_output` is [N, P]; `grad_h_n` [B, P] (packed only, else null: padded h_n is
/// a view of the output); `grad_c_n` [B, H] for LSTM (or null).
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
void recurrent_backward(const RecurrentBuffers<S>& b, const S* grad_output, const S* grad_h_n, const S* grad_c_n,
                        const RecurrentGradients<S>& grads);

}  // namespace tapegrad::detail
