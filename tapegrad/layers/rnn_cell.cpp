#include <tapegrad/layers/rnn_cell.h>

#include <cmath>

#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/linalg.h>

namespace tapegrad::nn {

RecurrentCellBase::RecurrentCellBase(const char* name, RecurrentKind kind, RNNCellOptions options)
    : Module(name), options_(options), kind_(kind) {
  if (options.input_size < 0) fail("{}: input_size must be non-negative, got {}", name, options.input_size);
  if (options.hidden_size <= 0) fail("{}: hidden_size must be greater than zero, got {}", name, options.hidden_size);
  if (!is_floating(options.dtype)) fail("{}: dtype must be float32 or float64, got {}", name, dtype_name(options.dtype));
  const std::int64_t G = recurrent_gate_count(kind) * options.hidden_size;
  weight_ih = register_parameter("weight_ih", empty({G, options.input_size}, options.dtype));
  weight_hh = register_parameter("weight_hh", empty({G, options.hidden_size}, options.dtype));
  if (options.bias) {
    bias_ih = register_parameter("bias_ih", empty({G}, options.dtype));
    bias_hh = register_parameter("bias_hh", empty({G}, options.dtype));
  }
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  options_.generator = nullptr;
  reset_parameters(options.generator ? *options.generator : default_generator());
}

void RecurrentCellBase::reset_parameters(Generator& generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(options_.hidden_size));
  for (Tensor p : parameters()) init::uniform_(p, -bound, bound, generator);
}

Tensor RecurrentCellBase::forward(const Tensor& input) { return step(input, Tensor(), Tensor()).h; }

LSTMCellState RecurrentCellBase::step(const Tensor& input, const Tensor& h, const Tensor& c, bool with_cell) {
  const char* name = type_name().c_str();
  const bool lstm = kind_ == RecurrentKind::LSTM;
  const DType dtype = weight_ih.dtype();  // after to(), not the options' dtype
  input.check_defined(name);
  if (input.dim() != 1 && input.dim() != 2)
    fail("{}: Expected input to be 1-D or 2-D but received {}-D tensor", name, input.dim());
  if (input.size(-1) != options_.input_size)
    fail("{}: input has inconsistent input_size: got {} expected {}", name, input.size(-1), options_.input_size);
  if (input.dtype() != dtype)
    fail("{}: input is {} but the layer's parameters are {} (convert one with .to())", name, dtype_name(input.dtype()),
         dtype_name(dtype));
  if (lstm && h.defined() != c.defined()) fail("{}: give both h and c, or neither", name);
  const bool batched = input.dim() == 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  const std::int64_t B = x.size(0), H = options_.hidden_size;
  auto state_of = [&](const Tensor& given, const char* what) {
    if (!given.defined()) return zeros({B, H}, TensorOptions{}.with_dtype(dtype));
    const Shape expected = batched ? Shape{B, H} : Shape{H};
    if (given.shape() != expected)
      fail("{}: expected {} of size {}, got {}", name, what, shape_string(expected), shape_string(given.shape()));
    if (given.dtype() != dtype)
      fail("{}: {} is {}, expected {}", name, what, dtype_name(given.dtype()), dtype_name(dtype));
    return batched ? given : given.unsqueeze(0);
  };
  const Tensor h0 = state_of(h, "hidden state"), c0 = lstm ? state_of(c, "cell state") : Tensor();
  const Tensor projection = linear(x, weight_ih, bias_ih);
  // Note: the new c is taken only when asked for, so forward(input) records nothing its output does not use.
  const bool want_c = lstm && with_cell;
  RecurrentSequence seq = recurrent_sequence(kind_, projection.view({1, B, projection.size(1)}), weight_hh, bias_hh,
                                             h0, c0, Tensor(), false, want_c);
  LSTMCellState out{want_c ? seq.h_n : seq.output.view({B, H}), seq.c_n};
  if (!batched) {
    out.h = out.h.squeeze(0);
    if (want_c) out.c = out.c.squeeze(0);
  }
  return out;
}

std::string RecurrentCellBase::extra_repr() const {
  std::string out = fmt::format("{}, {}", options_.input_size, options_.hidden_size);
  if (!options_.bias) out += ", bias=False";
  if (kind_ == RecurrentKind::RNNReLU) out += ", nonlinearity='relu'";
  return out;
}

namespace {

RecurrentKind cell_kind(RNNNonlinearity n) {
  return n == RNNNonlinearity::ReLU ? RecurrentKind::RNNReLU : RecurrentKind::RNNTanh;
}

// Note: clone_into overwrites every value, so the fresh cell draws its throwaway init from a local generator
// instead of advancing the caller's random stream.
template <class Cell>
std::shared_ptr<Module> fresh(RNNCellOptions options, Generator& scratch) {
  options.generator = &scratch;
  return std::make_shared<Cell>(options);
}

}  // namespace

RNNCell::RNNCell(RNNCellOptions options) : RecurrentCellBase("RNNCell", cell_kind(options.nonlinearity), options) {}
Tensor RNNCell::forward_with_state(const Tensor& input, const Tensor& hx) { return step(input, hx, Tensor()).h; }
std::shared_ptr<Module> RNNCell::clone() const {
  Generator scratch;
  return clone_into(fresh<RNNCell>(options_, scratch));
}

LSTMCell::LSTMCell(LSTMCellOptions options) : RecurrentCellBase("LSTMCell", RecurrentKind::LSTM, options) {}
LSTMCellState LSTMCell::forward_with_state(const Tensor& input, const Tensor& h, const Tensor& c) {
  return step(input, h, c, true);
}
std::shared_ptr<Module> LSTMCell::clone() const {
  Generator scratch;
  return clone_into(fresh<LSTMCell>(options_, scratch));
}

GRUCell::GRUCell(GRUCellOptions options) : RecurrentCellBase("GRUCell", RecurrentKind::GRU, options) {}
Tensor GRUCell::forward_with_state(const Tensor& input, const Tensor& hx) { return step(input, hx, Tensor()).h; }
std::shared_ptr<Module> GRUCell::clone() const {
  Generator scratch;
  return clone_into(fresh<GRUCell>(options_, scratch));
}

}  // namespace tapegrad::nn
