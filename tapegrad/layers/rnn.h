#pragma once
/// nn::RNN, nn::LSTM and nn::GRU: multi-layer, optionally bidirectional recurrent layers with PyTorch 1.13's
/// options, initialisation, shapes, return values and state_dict names.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/recurrent.h>
#include <tapegrad/layers/packed_sequence.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// The nonlinearity of nn::RNN and nn::RNNCell (PyTorch's nonlinearity='tanh' / 'relu').
enum class RNNNonlinearity { Tanh, ReLU };

/// The options RNN, LSTM and GRU share, with PyTorch's names and defaults; `Derived` makes the setters chain.
template <class Derived>
struct RecurrentOptionsBase {
  RecurrentOptionsBase(std::int64_t input, std::int64_t hidden) : input_size(input), hidden_size(hidden) {}
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 1;
  /// Both bias_ih and bias_hh (PyTorch has one switch for the two).
  bool bias = true;
  /// Input and output [B, T, features] instead of [T, B, features] (the states stay [layers * directions, B, H]).
  bool batch_first = false;
  /// Dropout probability on the outputs of every layer but the last, in training mode.
  double dropout = 0.0;
  bool bidirectional = false;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  /// The seed of the between-layer dropout stream (by default one draw from the default generator at
  /// construction when dropout > 0, as nn::Dropout).
  std::optional<std::uint64_t> dropout_seed;
  Derived& with_num_layers(std::int64_t n) { num_layers = n; return self(); }
  Derived& with_bias(bool on) { bias = on; return self(); }
  Derived& with_batch_first(bool on) { batch_first = on; return self(); }
  Derived& with_dropout(double p) { dropout = p; return self(); }
  Derived& with_bidirectional(bool on) { bidirectional = on; return self(); }
  Derived& with_dtype(DType d) { dtype = d; return self(); }
  Derived& with_generator(Generator& g) { generator = &g; return self(); }
  Derived& with_dropout_seed(std::uint64_t seed) { dropout_seed = seed; return self(); }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

/// Options for RNN (`RNNOptions(10, 20).with_nonlinearity(RNNNonlinearity::ReLU)`).
struct RNNOptions : RecurrentOptionsBase<RNNOptions> {
  RNNOptions(std::int64_t input, std::int64_t hidden) : RecurrentOptionsBase(input, hidden) {}
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;
  RNNOptions& with_nonlinearity(RNNNonlinearity n) { nonlinearity = n; return *this; }
};

/// Options for LSTM (`LSTMOptions(10, 20).with_num_layers(2).with_bidirectional(true)`).
struct LSTMOptions : RecurrentOptionsBase<LSTMOptions> {
  LSTMOptions(std::int64_t input, std::int64_t hidden) : RecurrentOptionsBase(input, hidden) {}
  /// When > 0, h is projected to proj_size features by weight_hr (PyTorch's LSTM proj_size); 0: no projection.
  std::int64_t proj_size = 0;
  LSTMOptions& with_proj_size(std::int64_t n) { proj_size = n; return *this; }
};

/// Options for GRU.
struct GRUOptions : RecurrentOptionsBase<GRUOptions> {
  GRUOptions(std::int64_t input, std::int64_t hidden) : RecurrentOptionsBase(input, hidden) {}
};

/// What RNN and GRU return: output [T, B, D * H] (or [B, T, D * H] batch_first; [T, D * H] unbatched) and h_n
/// [num_layers * D, B, H] ([num_layers * D, H] unbatched), D = 2 when bidirectional, ordered as PyTorch:
/// layer 0 forward, layer 0 reverse, layer 1 forward...
struct RNNResult {
  Tensor output;
  Tensor h_n;
};

/// What LSTM returns: as RNNResult, with H replaced by proj_size in output and h_n when projecting, and c_n
/// [num_layers * D, B, hidden_size].
struct LSTMResult {
  Tensor output;
  Tensor h_n;
  Tensor c_n;
};

/// What RNN and GRU return for a PackedSequence: the output packed like the input (data [sum(batch_sizes),
/// D * H], the same batch_sizes and indices) and h_n [num_layers * D, B, H] in the caller's batch order.
struct PackedRNNResult {
  PackedSequence output;
  Tensor h_n;
};

/// What LSTM returns for a PackedSequence: as PackedRNNResult, plus c_n [num_layers * D, B, hidden_size].
struct PackedLSTMResult {
  PackedSequence output;
  Tensor h_n;
  Tensor c_n;
};

/// The common machinery of RNN, LSTM and GRU: parameters by PyTorch's names, the layer loop, dropout between
/// layers. Per layer and direction it runs one input GEMM for the whole sequence (linear) and one
/// recurrent_sequence op (ops/recurrent.h): two tape records, plus views and the concatenation of directions.
/// Note: parameters are registered in PyTorch's order (per layer, per direction: weight_ih, weight_hh,
/// bias_ih, bias_hh, weight_hr) and all drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch's
/// reset_parameters. The dropout stream (seed, count) is kept in two non-persistent buffers, so that a
/// PyTorch state_dict loads strictly; it is not saved.
class RecurrentBase : public Module {
 public:
  /// [T, B, input_size] (or batch_first [B, T, input_size], or unbatched [T, input_size]) -> output only.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  /// Redraws every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) in registration order.
  void reset_parameters(Generator& generator = default_generator());
  /// The parameters of layer `layer` and direction `direction` (0 forward, 1 reverse), by their PyTorch name
  /// without the suffix ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr").
  Tensor layer_parameter(const std::string& name, std::int64_t layer, std::int64_t direction = 0) const;

  /// The seed of the between-layer dropout stream.
  Tensor mask_seed;
  /// Training-mode forwards with dropout so far.
  Tensor num_masks_drawn;

 /// What the three layers share, from their options (public for the layers' own construction code).
  struct Spec {
    RecurrentKind kind;
    std::int64_t input_size, hidden_size, num_layers;
    bool bias, batch_first;
    double dropout;
    bool bidirectional;
    std::int64_t proj_size;
    DType dtype;
    Generator* generator;
    std::optional<std::uint64_t> dropout_seed;
  };

 protected:
  RecurrentBase(const char* name, Spec spec);
  /// The whole stack; c0 and c_n only for LSTM; h_n and c_n left undefined unless `states`.
  LSTMResult run(const Tensor& input, const Tensor& h0, const Tensor& c0, bool states = true);
  /// The whole stack over a packed batch (h0 / c0 and the returned states in the caller's batch order).
  PackedLSTMResult run_packed(const PackedSequence& input, const Tensor& h0, const Tensor& c0);
  const Spec& spec() const { return spec_; }

 private:
  /// The layer loop over x [T, B, F] (batch_sizes empty) or packed x [N, F], with h0 / c0 [L * D, B, *] in x's
  /// batch order; returns output in x's layout.
  LSTMResult run_layers(const Tensor& x, const std::vector<std::int64_t>& batch_sizes, const Tensor& h0,
                        const Tensor& c0, bool states);
  Spec spec_;
};

/// Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or ReLU).
class RNN : public RecurrentBase {
 public:
  explicit RNN(RNNOptions options);
  RNN(std::int64_t input_size, std::int64_t hidden_size) : RNN(RNNOptions(input_size, hidden_size)) {}
  /// Output and h_n; h0 [num_layers * D, B, H] ([num_layers * D, H] unbatched), zeros when undefined.
  RNNResult forward_with_state(const Tensor& input, const Tensor& h0 = Tensor());
  /// A variable-length batch (pack_padded_sequence, pack_sequence): packed output and h_n; h0 [num_layers * D,
  /// B, H] in the caller's batch order. Each sequence runs its own steps only; the reverse direction starts at
  /// each sequence's last step.
  PackedRNNResult forward_with_state(const PackedSequence& input, const Tensor& h0 = Tensor());
  std::shared_ptr<Module> clone() const override;
  const RNNOptions& options() const { return options_; }

 private:
  RNNOptions options_;
};

/// LSTM with gates i, f, g, o: c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t) (times weight_hr^T with proj_size).
class LSTM : public RecurrentBase {
 public:
  explicit LSTM(LSTMOptions options);
  LSTM(std::int64_t input_size, std::int64_t hidden_size) : LSTM(LSTMOptions(input_size, hidden_size)) {}
  /// Output, h_n and c_n; h0 [num_layers * D, B, proj_size or H], c0 [num_layers * D, B, H] (without the B
  /// dim when unbatched), zeros when undefined (give both or neither, as PyTorch).
  LSTMResult forward_with_state(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  /// A variable-length batch: packed output, h_n and c_n (as RNN's packed forward_with_state).
  PackedLSTMResult forward_with_state(const PackedSequence& input, const Tensor& h0 = Tensor(),
                                      const Tensor& c0 = Tensor());
  std::shared_ptr<Module> clone() const override;
  const LSTMOptions& options() const { return options_; }

 private:
  LSTMOptions options_;
};

/// GRU with gates r, z, n: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
class GRU : public RecurrentBase {
 public:
  explicit GRU(GRUOptions options);
  GRU(std::int64_t input_size, std::int64_t hidden_size) : GRU(GRUOptions(input_size, hidden_size)) {}
  /// Output and h_n, as RNN::forward_with_state (both overloads).
  RNNResult forward_with_state(const Tensor& input, const Tensor& h0 = Tensor());
  PackedRNNResult forward_with_state(const PackedSequence& input, const Tensor& h0 = Tensor());
  std::shared_ptr<Module> clone() const override;
  const GRUOptions& options() const { return options_; }

 private:
  GRUOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
