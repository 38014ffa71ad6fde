#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/layers/rnn.h>

#include <bit>
#include <cmath>

#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/dropout.h>
#include <tapegrad/framework/ops/linalg.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad::nn {

namespace {

std::string suffix(std::int64_t direction) { return direction == 1 ? "_reverse" : ""; }

template <class Options>
RecurrentBase::Spec common_spec(RecurrentKind kind, const Options& o, std::int64_t proj_size) {
  return {kind,   o.input_size,    o.hidden_size, o.num_layers, o.bias, o.batch_first, o.dropout,
          o.bidirectional, proj_size, o.dtype,      o.generator,  o.dropout_seed};
}

RecurrentKind rnn_kind(RNNNonlinearity n) {
  return n == RNNNonlinearity::ReLU ? RecurrentKind::RNNReLU : RecurrentKind::RNNTanh;
}

}  // namespace

RecurrentBase::RecurrentBase(const char* name, Spec spec) : Module(name), spec_(spec) {
  const std::int64_t H = spec.hidden_size, P = spec.proj_size;
  if (spec.input_size < 0) fail("{}: input_size must be non-negative, got {}", name, spec.input_size);
  if (H <= 0) fail("{}: hidden_size must be greater than zero, got {}", name, H);
  if (spec.num_layers <= 0) fail("{}: num_layers must be greater than zero, got {}", name, spec.num_layers);
  if (!(spec.dropout >= 0.0 && spec.dropout <= 1.0))
    fail("{}: dropout should be a number in range [0, 1] representing the probability of an element being zeroed, "
         "got {}",
         name, spec.dropout);
  if (P < 0) fail("{}: proj_size should be a positive integer or zero to disable projections, got {}", name, P);
  if (P >= H) fail("{}: proj_size has to be smaller than hidden_size, got proj_size={} and hidden_size={}", name, P, H);
  if (!is_floating(spec.dtype)) fail("{}: dtype must be float32 or float64, got {}", name, dtype_name(spec.dtype));
  const std::int64_t G = recurrent_gate_count(spec.kind) * H, state = P > 0 ? P : H;
  const std::int64_t directions = spec.bidirectional ? 2 : 1;
  for (std::int64_t layer = 0; layer < spec.num_layers; ++layer)
    for (std::int64_t d = 0; d < directions; ++d) {
      const std::string tail = "_l" + std::to_string(layer) + suffix(d);
      const std::int64_t in = layer == 0 ? spec.input_size : state * directions;
      register_parameter("weight_ih" + tail, empty({G, in}, spec.dtype));
      register_parameter("weight_hh" + tail, empty({G, state}, spec.dtype));
      if (spec.bias) {
        register_parameter("bias_ih" + tail, empty({G}, spec.dtype));
        register_parameter("bias_hh" + tail, empty({G}, spec.dtype));
      }
      if (P > 0) register_parameter("weight_hr" + tail, empty({P, H}, spec.dtype));
    }
  const TensorOptions int64 = TensorOptions{}.with_dtype(DType::Int64);
  std::uint64_t seed = 0;
  if (spec.dropout_seed) seed = *spec.dropout_seed;
  else if (spec.dropout > 0.0) seed = default_generator().next_bits();
  spec_.dropout_seed = seed;
  mask_seed = register_buffer("mask_seed", zeros({}, int64), false);
  *mask_seed.data<std::int64_t>() = std::bit_cast<std::int64_t>(seed);  // exact: a double cannot hold every seed
  num_masks_drawn = register_buffer("num_masks_drawn", zeros({}, int64), false);
  // Note: the generator is only borrowed for construction; keeping the pointer would dangle in a clone.
  spec_.generator = nullptr;
  reset_parameters(spec.generator ? *spec.generator : default_generator());
}

void RecurrentBase::reset_parameters(Generator& generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(spec_.hidden_size));
  for (Tensor p : parameters()) init::uniform_(p, -bound, bound, generator);
}

Tensor RecurrentBase::layer_parameter(const std::string& name, std::int64_t layer, std::int64_t direction) const {
  return parameter(name + "_l" + std::to_string(layer) + suffix(direction));
}

Tensor RecurrentBase::forward(const Tensor& input) { return run(input, Tensor(), Tensor(), false).output; }

LSTMResult RecurrentBase::run(const Tensor& input, const Tensor& h0_given, const Tensor& c0_given, bool states) {
  // Note: ONNX export. While tracing, the whole stack reports itself as one op, "nn.recurrent", with the caller's
  // input and states and the parameters by name (framework/onnx/detail/converters_recurrent.cpp writes ONNX's
  // RNN / LSTM / GRU nodes from it); the ops inside stay silent.
  trace::LayerScope scope(*this);
  const char* name = type_name().c_str();
  const Spec& s = spec_;
  const bool lstm = s.kind == RecurrentKind::LSTM;
  const DType dtype = parameters().front().dtype();  // after to(), not the options' dtype
  input.check_defined(name);
  if (input.dim() != 2 && input.dim() != 3)
    fail("{}: Expected input to be 2-D or 3-D but received {}-D tensor", name, input.dim());
  if (input.size(-1) != s.input_size)
    fail("{}: input.size(-1) must be equal to input_size. Expected {}, got {}", name, s.input_size, input.size(-1));
  if (input.dtype() != dtype)
    fail("{}: input is {} but the layer's parameters are {} (convert one with .to())", name, dtype_name(input.dtype()),
         dtype_name(dtype));
  if (lstm && h0_given.defined() != c0_given.defined()) fail("{}: give both h0 and c0, or neither", name);
  const bool batched = input.dim() == 3;
  const Tensor x = !batched ? input.unsqueeze(1) : s.batch_first ? input.transpose(0, 1) : input;
  const std::int64_t T = x.size(0), B = x.size(1), H = s.hidden_size;
  const std::int64_t D = s.bidirectional ? 2 : 1, P = s.proj_size > 0 ? s.proj_size : H, L = s.num_layers;
  if (T == 0) fail("{}: the input has no time steps", name);
  auto state_of = [&](const Tensor& given, std::int64_t width, const char* what) {
    if (!given.defined()) return zeros({L * D, B, width}, TensorOptions{}.with_dtype(dtype));
    const Shape expected = batched ? Shape{L * D, B, width} : Shape{L * D, width};
    if (given.shape() != expected)
      fail("{}: expected {} of size {}, got {}", name, what, shape_string(expected), shape_string(given.shape()));
    if (given.dtype() != dtype) fail("{}: {} is {}, expected {}", name, what, dtype_name(given.dtype()), dtype_name(dtype));
    return batched ? given : given.unsqueeze(1);
  };
  const Tensor h0 = state_of(h0_given, P, "hidden state h0");
  const Tensor c0 = lstm ? state_of(c0_given, H, "cell state c0") : Tensor();
  LSTMResult result = run_layers(x, {}, h0, c0, states);
  if (!batched) {
    result.output = result.output.squeeze(1);
    if (states) result.h_n = result.h_n.squeeze(1);
    if (states && lstm) result.c_n = result.c_n.squeeze(1);
  } else if (s.batch_first) {
    result.output = result.output.transpose(0, 1);
  }
  if (scope.tracing()) {
    trace::Attributes attributes{{"kind", static_cast<std::int64_t>(s.kind)}, {"hidden_size", H}, {"num_layers", L},
                                 {"bidirectional", std::int64_t{D == 2}}, {"batch_first", std::int64_t{s.batch_first}},
                                 {"bias", std::int64_t{s.bias}}, {"proj_size", s.proj_size}};
    for (const auto& [parameter, value] : named_parameters()) attributes.push_back({parameter, value});
    std::vector<Tensor> outputs{result.output};
    if (states) outputs.push_back(result.h_n);
    if (states && lstm) outputs.push_back(result.c_n);
    scope.report("nn.recurrent", {input, h0_given, c0_given}, outputs, std::move(attributes));
  }
  return result;
}

PackedLSTMResult RecurrentBase::run_packed(const PackedSequence& input, const Tensor& h0_given, const Tensor& c0_given) {
  const char* name = type_name().c_str();
  const Spec& s = spec_;
  const bool lstm = s.kind == RecurrentKind::LSTM;
  const DType dtype = parameters().front().dtype();
  const std::vector<std::int64_t> batch_sizes = packed_batch_sizes(input, name);
  const Tensor& data = input.data;
  if (data.dim() != 2)
    fail("{}: expected packed data [sum(batch_sizes), input_size], got {}", name, shape_string(data.shape()));
  if (data.size(1) != s.input_size)
    fail("{}: input.size(-1) must be equal to input_size. Expected {}, got {}", name, s.input_size, data.size(1));
  if (data.dtype() != dtype)
    fail("{}: input is {} but the layer's parameters are {} (convert one with .to())", name, dtype_name(data.dtype()),
         dtype_name(dtype));
  if (lstm && h0_given.defined() != c0_given.defined()) fail("{}: give both h0 and c0, or neither", name);
  const std::int64_t B = batch_sizes[0], D = s.bidirectional ? 2 : 1, L = s.num_layers;
  const std::int64_t P = s.proj_size > 0 ? s.proj_size : s.hidden_size;
  // As PyTorch: given states are in the caller's batch order and permuted into the packed (sorted) order; the
  // final states are permuted back.
  auto state_of = [&](const Tensor& given, std::int64_t width, const char* what) {
    if (!given.defined()) return zeros({L * D, B, width}, TensorOptions{}.with_dtype(dtype));
    if (given.shape() != Shape{L * D, B, width})
      fail("{}: expected {} of size {}, got {}", name, what, shape_string({L * D, B, width}), shape_string(given.shape()));
    if (given.dtype() != dtype) fail("{}: {} is {}, expected {}", name, what, dtype_name(given.dtype()), dtype_name(dtype));
    return input.sorted_indices.defined() ? index_select(given, 1, input.sorted_indices) : given;
  };
  const Tensor h0 = state_of(h0_given, P, "hidden state h0");
  const Tensor c0 = lstm ? state_of(c0_given, s.hidden_size, "cell state c0") : Tensor();
  LSTMResult r = run_layers(data, batch_sizes, h0, c0, true);
  auto unsort = [&](const Tensor& t) {
    return t.defined() && input.unsorted_indices.defined() ? index_select(t, 1, input.unsorted_indices) : t;
  };
  return {{r.output, input.batch_sizes, input.sorted_indices, input.unsorted_indices}, unsort(r.h_n), unsort(r.c_n)};
}

LSTMResult RecurrentBase::run_layers(const Tensor& x, const std::vector<std::int64_t>& batch_sizes, const Tensor& h0,
                                     const Tensor& c0, bool states) {
  const char* name = type_name().c_str();
  const Spec& s = spec_;
  const bool lstm = s.kind == RecurrentKind::LSTM, packed = !batch_sizes.empty();
  // Padded x is [T, B, F]; packed x is [N, F] with its steps' batch sizes (and stays packed through every layer).
  const std::int64_t T = packed ? 0 : x.size(0), B = packed ? 0 : x.size(1);
  const std::int64_t D = s.bidirectional ? 2 : 1, L = s.num_layers;
  const bool drop = is_training() && s.dropout > 0.0 && L > 1;
  std::optional<Generator> dropout_generator;
  if (drop) {
    const std::int64_t calls = *num_masks_drawn.data<std::int64_t>();
    if (calls < 0) fail("{}: num_masks_drawn is {}: it must be non-negative", name, calls);
    const auto seed = std::bit_cast<std::uint64_t>(*mask_seed.data<std::int64_t>());
    dropout_generator.emplace(tapegrad::detail::splitmix64_finalizer(seed ^ tapegrad::detail::splitmix64_finalizer(static_cast<std::uint64_t>(calls))));
  }
  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (std::int64_t layer = 0; layer < L; ++layer) {
    const Tensor flat = packed ? layer_input : layer_input.reshape({T * B, layer_input.size(2)});
    std::vector<Tensor> outputs;
    for (std::int64_t d = 0; d < D; ++d) {
      const std::int64_t index = layer * D + d;
      auto p = [&](const char* n) { return s.bias || n[0] == 'w' ? layer_parameter(n, layer, d) : Tensor(); };
      const Tensor projection = linear(flat, p("weight_ih"), p("bias_ih"));
      const Tensor weight_hr = s.proj_size > 0 ? p("weight_hr") : Tensor();
      RecurrentSequence seq = recurrent_sequence(
          s.kind, packed ? projection : projection.view({T, B, projection.size(1)}), p("weight_hh"), p("bias_hh"),
          h0.select(0, index), lstm ? c0.select(0, index) : Tensor(), weight_hr, d == 1, states, batch_sizes);
      outputs.push_back(seq.output);
      if (states) h_n.push_back(seq.h_n);
      if (states && lstm) c_n.push_back(seq.c_n);
    }
    layer_input = D == 2 ? cat(outputs, packed ? 1 : 2) : outputs[0];
    if (drop && layer + 1 < L) layer_input = dropout(layer_input, s.dropout, true, *dropout_generator);
  }
  if (drop) ++*num_masks_drawn.data<std::int64_t>();

  return {layer_input, states ? stack(h_n, 0) : Tensor(), states && lstm ? stack(c_n, 0) : Tensor()};
}

std::string RecurrentBase::extra_repr() const {
  const Spec& s = spec_;
  std::string out = fmt::format("{}, {}", s.input_size, s.hidden_size);
  if (s.proj_size > 0) out += fmt::format(", proj_size={}", s.proj_size);
  if (s.num_layers != 1) out += fmt::format(", num_layers={}", s.num_layers);
  if (s.kind == RecurrentKind::RNNReLU) out += ", nonlinearity='relu'";
  if (!s.bias) out += ", bias=False";
  if (s.batch_first) out += ", batch_first=True";
  if (s.dropout != 0.0) out += fmt::format(", dropout={}", s.dropout);
  if (s.bidirectional) out += ", bidirectional=True";
  return out;
}

RNN::RNN(RNNOptions options)
    : RecurrentBase("RNN", common_spec(rnn_kind(options.nonlinearity), options, 0)), options_(options) {
  options_.generator = nullptr;
  options_.dropout_seed = spec().dropout_seed;
}

RNNResult RNN::forward_with_state(const Tensor& input, const Tensor& h0) {
  LSTMResult r = run(input, h0, Tensor());
  return {r.output, r.h_n};
}

PackedRNNResult RNN::forward_with_state(const PackedSequence& input, const Tensor& h0) {
  PackedLSTMResult r = run_packed(input, h0, Tensor());
  return {r.output, r.h_n};
}

// Note: clone_into overwrites every value, so the fresh layer draws its throwaway init from a local generator
// instead of advancing the caller's random stream.
std::shared_ptr<Module> RNN::clone() const {
  Generator scratch;
  RNNOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<RNN>(options));
}

LSTM::LSTM(LSTMOptions options)
    : RecurrentBase("LSTM", common_spec(RecurrentKind::LSTM, options, options.proj_size)), options_(options) {
  options_.generator = nullptr;
  options_.dropout_seed = spec().dropout_seed;
}

LSTMResult LSTM::forward_with_state(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  return run(input, h0, c0);
}

PackedLSTMResult LSTM::forward_with_state(const PackedSequence& input, const Tensor& h0, const Tensor& c0) {
  return run_packed(input, h0, c0);
}

std::shared_ptr<Module> LSTM::clone() const {
  Generator scratch;
  LSTMOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<LSTM>(options));
}

GRU::GRU(GRUOptions options) : RecurrentBase("GRU", common_spec(RecurrentKind::GRU, options, 0)), options_(options) {
  options_.generator = nullptr;
  options_.dropout_seed = spec().dropout_seed;
}

RNNResult GRU::forward_with_state(const Tensor& input, const Tensor& h0) {
  LSTMResult r = run(input, h0, Tensor());
  return {r.output, r.h_n};
}

PackedRNNResult GRU::forward_with_state(const PackedSequence& input, const Tensor& h0) {
  PackedLSTMResult r = run_packed(input, h0, Tensor());
  return {r.output, r.h_n};
}

std::shared_ptr<Module> GRU::clone() const {
  Generator scratch;
  GRUOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<GRU>(options));
}

}  // namespace tapegrad::nn
