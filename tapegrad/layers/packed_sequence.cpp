// PackedSequence and its conversions (PyTorch 1.13's torch.nn.utils.rnn). Packing and padding are each one
// differentiable index_select over precomputed row indices, so gradients flow through them with no op of their
// own: packing gathers the rows (t, sorted_indices[n]) of the flattened padded batch, padding gathers them back
// with an extra padding row appended for the positions past each sequence's end.
#include <tapegrad/layers/packed_sequence.h>

#include <algorithm>
#include <numeric>

#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad::nn {

namespace {

Tensor int64_vector(const std::vector<std::int64_t>& values) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())});
}

std::vector<std::int64_t> vector_of(const Tensor& t, const char* caller, const char* what) {
  if (!t.defined()) fail("{}: {} is undefined", caller, what);
  if (t.dtype() != DType::Int64 || t.dim() != 1)
    fail("{}: expected {} as a 1-D int64 tensor, got {} {}", caller, what, dtype_name(t.dtype()),
         shape_string(t.shape()));
  const Tensor c = t.contiguous();
  const std::int64_t* p = c.data<std::int64_t>();
  return {p, p + c.numel()};
}

// input's shape with the first two extents replaced by one of `rows`.
Shape rows_shape(const Shape& shape, std::int64_t rows) {
  Shape out{rows};
  out.insert(out.end(), shape.begin() + 2, shape.end());
  return out;
}

}  // namespace

std::vector<std::int64_t> packed_batch_sizes(const PackedSequence& sequence, const char* caller) {
  std::vector<std::int64_t> sizes = vector_of(sequence.batch_sizes, caller, "batch_sizes");
  if (sizes.empty()) fail("{}: batch_sizes is empty (a packed sequence has at least one step)", caller);
  for (std::size_t t = 0; t < sizes.size(); ++t)
    if (sizes[t] < 1 || (t > 0 && sizes[t] > sizes[t - 1]))
      fail("{}: batch_sizes must be positive and non-increasing, got {} at step {}", caller, sizes[t], t);
  sequence.data.check_defined(caller);
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  if (sequence.data.dim() < 1 || sequence.data.size(0) != total)
    fail("{}: data must have sum(batch_sizes) = {} rows, got {}", caller, total, shape_string(sequence.data.shape()));
  if (sequence.sorted_indices.defined() != sequence.unsorted_indices.defined())
    fail("{}: sorted_indices and unsorted_indices must both be given or both be undefined", caller);
  return sizes;
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<std::int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  const char* op = "pack_padded_sequence";
  input.check_defined(op);
  if (input.dim() < 2) fail("{}: expected input [T, B, *] or batch_first [B, T, *], got {}", op, shape_string(input.shape()));
  const Tensor x = batch_first ? input.transpose(0, 1) : input;  // [T, B, *]
  const std::int64_t T = x.size(0), B = x.size(1);
  if (static_cast<std::int64_t>(lengths.size()) != B)
    fail("{}: Expected `len(lengths)` to be equal to batch_size, but got {} (batch_size={})", op, lengths.size(), B);
  // Note: an empty batch has no longest sequence to size the steps by (order.front() below).
  if (B == 0) fail("{}: Cannot pack empty tensors (a batch of 0 sequences, input {})", op, shape_string(input.shape()));
  for (std::int64_t n : lengths) {
    if (n <= 0)
      fail("{}: Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0", op);
    // Note: PyTorch 1.13 does not check this and reads past the input; refusing is the only safe answer.
    if (n > T) fail("{}: a length ({}) exceeds the input's {} time steps ({})", op, n, T, shape_string(input.shape()));
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(B));
  std::iota(order.begin(), order.end(), 0);
  if (enforce_sorted) {
    if (!std::is_sorted(lengths.begin(), lengths.end(), std::greater<>()))
      fail("{}: `lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
           "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if you "
           "do not need ONNX exportability.",
           op);
  } else {  // longest first, ties in batch order (what torch.sort gives here)
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return lengths[static_cast<std::size_t>(a)] > lengths[static_cast<std::size_t>(b)];
    });
  }
  const std::int64_t steps = lengths[static_cast<std::size_t>(order.front())];
  std::vector<std::int64_t> batch_sizes, rows;
  for (std::int64_t t = 0; t < steps; ++t) {
    std::int64_t count = 0;
    for (std::int64_t n : order) {
      if (lengths[static_cast<std::size_t>(n)] <= t) break;
      rows.push_back(t * B + n);
      ++count;
    }
    batch_sizes.push_back(count);
  }
  PackedSequence out;
  out.data = index_select(x.reshape(rows_shape(x.shape(), T * B)), 0, int64_vector(rows));
  out.batch_sizes = int64_vector(batch_sizes);
  if (!enforce_sorted) {
    std::vector<std::int64_t> inverse(order.size());
    for (std::size_t k = 0; k < order.size(); ++k) inverse[static_cast<std::size_t>(order[k])] = static_cast<std::int64_t>(k);
    out.sorted_indices = int64_vector(order);
    out.unsorted_indices = int64_vector(inverse);
  }
  return out;
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  return pack_padded_sequence(input, vector_of(lengths, "pack_padded_sequence", "lengths"), batch_first, enforce_sorted);
}

std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                              std::int64_t total_length) {
  const char* op = "pad_packed_sequence";
  const std::vector<std::int64_t> sizes = packed_batch_sizes(sequence, op);
  const std::int64_t steps = static_cast<std::int64_t>(sizes.size()), B = sizes[0];
  const std::int64_t N = sequence.data.size(0);
  if (total_length >= 0 && total_length < steps)
    fail("{}: Expected total_length to be at least the length of the longest sequence in input, but got "
         "total_length={} and max sequence length being {}",
         op, total_length, steps);
  const std::int64_t T = total_length >= 0 ? total_length : steps;
  std::vector<std::int64_t> unsorted(static_cast<std::size_t>(B));
  std::iota(unsorted.begin(), unsorted.end(), 0);
  if (sequence.unsorted_indices.defined()) {
    unsorted = vector_of(sequence.unsorted_indices, op, "unsorted_indices");
    if (static_cast<std::int64_t>(unsorted.size()) != B)
      fail("{}: unsorted_indices has {} entries for a batch of {}", op, unsorted.size(), B);
  }
  // sorted row n's length, and the row offset of each step
  std::vector<std::int64_t> length(static_cast<std::size_t>(B), 0), offset(static_cast<std::size_t>(steps));
  for (std::int64_t t = 0, at = 0; t < steps; at += sizes[static_cast<std::size_t>(t)], ++t) {
    offset[static_cast<std::size_t>(t)] = at;
    for (std::int64_t n = 0; n < sizes[static_cast<std::size_t>(t)]; ++n) ++length[static_cast<std::size_t>(n)];
  }
  std::vector<std::int64_t> rows, lengths(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = unsorted[static_cast<std::size_t>(b)];
    if (n < 0 || n >= B) fail("{}: unsorted_indices holds {} for a batch of {}", op, n, B);
    lengths[static_cast<std::size_t>(b)] = length[static_cast<std::size_t>(n)];
  }
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t n = unsorted[static_cast<std::size_t>(b)];
      rows.push_back(t < length[static_cast<std::size_t>(n)] ? offset[static_cast<std::size_t>(t)] + n : N);
    }
  Shape row_shape = sequence.data.shape();
  row_shape[0] = 1;
  const Tensor padding = full(row_shape, padding_value, TensorOptions{}.with_dtype(sequence.data.dtype()));
  Shape padded_shape = sequence.data.shape();
  padded_shape[0] = B;
  padded_shape.insert(padded_shape.begin(), T);
  Tensor padded = index_select(cat({sequence.data, padding}, 0), 0, int64_vector(rows)).view(padded_shape);
  if (batch_first) padded = padded.transpose(0, 1);
  return {padded, int64_vector(lengths)};
}

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  const char* op = "pad_sequence";
  if (sequences.empty()) fail("{}: received an empty list of sequences", op);
  std::int64_t longest = 0;
  for (const Tensor& s : sequences) {
    s.check_defined(op);
    if (s.dim() < 1) fail("{}: expected each sequence to be at least 1-D [L, *], got a 0-D tensor", op);
    const Shape& first = sequences.front().shape();
    if (!std::equal(s.shape().begin() + 1, s.shape().end(), first.begin() + 1, first.end()) || s.dtype() != sequences.front().dtype())
      fail("{}: every sequence must have the trailing shape and dtype of the first: {} {} vs {} {}", op,
           shape_string(s.shape()), dtype_name(s.dtype()), shape_string(first), dtype_name(sequences.front().dtype()));
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> columns;
  for (const Tensor& s : sequences) {
    Tensor column = s;
    if (s.size(0) < longest) {
      Shape tail = s.shape();
      tail[0] = longest - s.size(0);
      column = cat({s, full(tail, padding_value, TensorOptions{}.with_dtype(s.dtype()))}, 0);
    }
    columns.push_back(column);
  }
  return stack(columns, batch_first ? 0 : 1);
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  if (sequences.empty()) fail("pack_sequence: received an empty list of sequences");
  std::vector<std::int64_t> lengths;
  for (const Tensor& s : sequences) {
    s.check_defined("pack_sequence");
    lengths.push_back(s.dim() >= 1 ? s.size(0) : 0);
  }
  return pack_padded_sequence(pad_sequence(sequences), lengths, false, enforce_sorted);
}

}  // namespace tapegrad::nn
