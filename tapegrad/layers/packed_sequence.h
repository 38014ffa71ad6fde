#pragma once
/// Variable-length batches for the recurrent layers: PackedSequence and PyTorch 1.13's
/// torch.nn.utils.rnn.pack_padded_sequence / pad_packed_sequence / pack_sequence / pad_sequence.
#include <tapegrad/export.h>
#include <cstdint>
#include <utility>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// A batch of sequences of different lengths, as PyTorch's PackedSequence: `data` [sum(batch_sizes), *] holds
/// time step 0 of every sequence, then step 1 of those at least 2 long, ... (time-major, longest sequence first
/// within a step); `batch_sizes` (int64 [T], on no tape) how many sequences each step has, non-increasing;
/// `sorted_indices` (int64 [B]) the caller's batch index of the k-th longest sequence and `unsorted_indices` its
/// inverse, both undefined when the batch was packed with enforce_sorted (already sorted by the caller).
/// nn::RNN, nn::LSTM and nn::GRU take and return it (forward_with_state).
struct PackedSequence {
  Tensor data;
  Tensor batch_sizes;
  Tensor sorted_indices;
  Tensor unsorted_indices;
};

/// Packs a padded batch `input` [T, B, *] ([B, T, *] batch_first) whose sequence b is lengths[b] steps long
/// (each in [1, T]). With enforce_sorted, lengths must be non-increasing (the caller sorted the batch) and no
/// permutation is kept; otherwise the batch is sorted here (stable, longest first) and restored by the layers
/// and pad_packed_sequence. Differentiable in `input` (one index_select).
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<std::int64_t>& lengths,
                                    bool batch_first = false, bool enforce_sorted = true);
/// As above with lengths as a 1-D int64 tensor (PyTorch accepts both).
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

/// The inverse of pack_padded_sequence: the padded batch [T, B, *] ([B, T, *] batch_first) in the caller's
/// original batch order, with `padding_value` after each sequence's end and T = total_length when given
/// (>= 1, at least the longest length; PyTorch's default: the longest length), and the lengths (int64 [B]).
/// Differentiable in sequence.data (one cat and one index_select).
std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                              double padding_value = 0.0, std::int64_t total_length = -1);

/// Pads a list of [L_i, *] tensors to [max L, n, *] ([n, max L, *] batch_first) with `padding_value`.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

/// Packs a list of [L_i, *] tensors: pack_padded_sequence(pad_sequence(sequences), lengths, false,
/// enforce_sorted), as PyTorch.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

/// The per-step batch sizes of `sequence` as a vector (checked: 1-D int64, positive, non-increasing).
std::vector<std::int64_t> packed_batch_sizes(const PackedSequence& sequence, const char* caller);

}  // namespace tapegrad::nn

TAPEGRAD_API_END
