#pragma once
/// The recurrent part of one RNN / LSTM / GRU layer and direction as one op: every time step's hidden GEMM and
/// gate arithmetic forward, and backpropagation through time backward, in a single tape record.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// The cell a recurrent op runs, with its gate count G: tanh or ReLU Elman cell (1), LSTM (4: i, f, g, o),
/// GRU (3: r, z, n), in PyTorch's gate order.
enum class RecurrentKind { RNNTanh, RNNReLU, LSTM, GRU };

/// What recurrent_sequence returns: output [T, B, P] (the hidden state of every step, in input time order;
/// packed [sum(batch_sizes), P] with batch_sizes), h_n [B, P] (the last step's hidden state: output[T - 1], or
/// output[0] when reversed), and for LSTM c_n [B, H].
struct RecurrentSequence {
  Tensor output;
  Tensor h_n;
  /// LSTM only; undefined otherwise.
  Tensor c_n;
};

/// Runs one layer and direction over a whole sequence. `input_projection` [T, B, G*H] is x W_ih^T (+ b_ih),
/// computed by the caller as one GEMM for all steps; per step the op adds h W_hh^T + b_hh (one GEMM) and
/// applies the gates (one fused pass). weight_hh is [G*H, P]; bias_hh [G*H] or undefined; h0 [B, P]; c0 [B, H]
/// (LSTM only); weight_hr [P, H] (LSTM with proj_size only, else undefined, and then P = H).
/// GRU: n = tanh(x_n + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h, as PyTorch.
/// `reverse` runs the steps from T - 1 down to 0 (the backward direction of a bidirectional layer).
/// Note: one tape record for all steps. Its backward is hand-written BPTT giving the gradients of
/// input_projection, weight_hh, bias_hh, h0, c0 and weight_hr (the caller's input GEMM then has ordinary matmul
/// autograd). It saves the gate activations [T, B, G*H], the cell states [T + 1, B, H] (LSTM), W_hn h + b_hn
/// [T, B, H] (GRU) and the pre-projection states [T, B, H] (proj_size), besides the output itself. The backward
/// is not itself differentiable: backward(create_graph=true) through it throws.
/// With `final_states` false, h_n and c_n are left undefined (no view of them is taken, so a caller that only
/// wants the output records nothing it does not use).
///
/// Packed sequences (nn::PackedSequence): with `batch_sizes` given (the rows of each of the T time steps,
/// positive and non-increasing, B = batch_sizes[0]), input_projection is the packed [sum(batch_sizes), G*H]
/// (time-major: step t's rows follow step t - 1's, row n being the n-th longest sequence) and output is packed
/// [sum(batch_sizes), P] the same way. Step t runs its hidden GEMM and gates on its batch_sizes[t] rows only,
/// as PyTorch does; h_n / c_n row n is the state after sequence n's own last step, and in `reverse` each
/// sequence starts at its own last step from its row of h0 / c0 (shorter sequences join as t decreases).
/// Note: the packed layout is the op's only layout (padded input is the case batch_sizes = [B] * T), so packing
/// costs no extra record and no padding compute; the whole batch stays one tape record.
RecurrentSequence recurrent_sequence(RecurrentKind kind, const Tensor& input_projection, const Tensor& weight_hh,
                                     const Tensor& bias_hh, const Tensor& h0, const Tensor& c0 = Tensor(),
                                     const Tensor& weight_hr = Tensor(), bool reverse = false,
                                     bool final_states = true, const std::vector<std::int64_t>& batch_sizes = {});

/// The number of gates of `kind` (1, 4 or 3).
std::int64_t recurrent_gate_count(RecurrentKind kind);

}  // namespace tapegrad

TAPEGRAD_API_END
