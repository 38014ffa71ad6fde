#pragma once
/// nn::RNNCell, nn::LSTMCell and nn::GRUCell: one time step of RNN, LSTM and GRU, with PyTorch 1.13's options,
/// initialisation, shapes and state_dict names (weight_ih, weight_hh, bias_ih, bias_hh).
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <string>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/ops/recurrent.h>
#include <tapegrad/layers/rnn.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options of the three cells (`RNNCellOptions(10, 20).with_bias(false)`); nonlinearity is RNNCell's only.
struct RNNCellOptions {
  RNNCellOptions(std::int64_t input, std::int64_t hidden) : input_size(input), hidden_size(hidden) {}
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  bool bias = true;
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;
  /// The element type of the parameters.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  RNNCellOptions& with_bias(bool on) { bias = on; return *this; }
  RNNCellOptions& with_nonlinearity(RNNNonlinearity n) { nonlinearity = n; return *this; }
  RNNCellOptions& with_dtype(DType d) { dtype = d; return *this; }
  RNNCellOptions& with_generator(Generator& g) { generator = &g; return *this; }
};
using LSTMCellOptions = RNNCellOptions;
using GRUCellOptions = RNNCellOptions;

/// The new (h, c) of an LSTMCell.
struct LSTMCellState {
  Tensor h;
  Tensor c;
};

/// What the three cells share: weight_ih [G*H, input_size], weight_hh [G*H, H], bias_ih, bias_hh [G*H], all drawn
/// from U(-1/sqrt(H), 1/sqrt(H)); one step is one linear (the input GEMM) and one recurrent_sequence op of one
/// step (the hidden GEMM and the fused gates).
class RecurrentCellBase : public Module {
 public:
  /// input [B, input_size] or unbatched [input_size] -> the new hidden state, from a zero state.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  /// Redraws every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters(Generator& generator = default_generator());
  const RNNCellOptions& options() const { return options_; }

  Tensor weight_ih;
  Tensor weight_hh;
  /// Undefined when built with bias = false.
  Tensor bias_ih;
  Tensor bias_hh;

 protected:
  RecurrentCellBase(const char* name, RecurrentKind kind, RNNCellOptions options);
  /// One step; c only for LSTMCell and when `with_cell`. Undefined states are zeros.
  LSTMCellState step(const Tensor& input, const Tensor& h, const Tensor& c, bool with_cell = false);
  RNNCellOptions options_;

 private:
  RecurrentKind kind_;
};

/// h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or ReLU).
class RNNCell : public RecurrentCellBase {
 public:
  explicit RNNCell(RNNCellOptions options);
  RNNCell(std::int64_t input_size, std::int64_t hidden_size) : RNNCell(RNNCellOptions(input_size, hidden_size)) {}
  /// The new hidden state from input and hx [B, H] ([H] unbatched; zeros when undefined).
  Tensor forward_with_state(const Tensor& input, const Tensor& hx);
  std::shared_ptr<Module> clone() const override;
};

/// One LSTM step with gates i, f, g, o.
class LSTMCell : public RecurrentCellBase {
 public:
  explicit LSTMCell(LSTMCellOptions options);
  LSTMCell(std::int64_t input_size, std::int64_t hidden_size) : LSTMCell(LSTMCellOptions(input_size, hidden_size)) {}
  /// The new (h, c) from input, h and c [B, H] ([H] unbatched; zeros when undefined; both or neither).
  LSTMCellState forward_with_state(const Tensor& input, const Tensor& h, const Tensor& c);
  std::shared_ptr<Module> clone() const override;
};

/// One GRU step with gates r, z, n.
class GRUCell : public RecurrentCellBase {
 public:
  explicit GRUCell(GRUCellOptions options);
  GRUCell(std::int64_t input_size, std::int64_t hidden_size) : GRUCell(GRUCellOptions(input_size, hidden_size)) {}
  /// The new hidden state from input and hx, as RNNCell::forward_with_state.
  Tensor forward_with_state(const Tensor& input, const Tensor& hx);
  std::shared_ptr<Module> clone() const override;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
