// ONNX forms of the recurrent layers: nn::RNN (tanh or relu), nn::LSTM and nn::GRU as ONNX's own RNN, LSTM and GRU ops,
// one node per layer (bidirectional in one node), from the one "nn.recurrent" report RecurrentBase::run makes
// while tracing (layers/rnn.cpp).
// Note: PyTorch orders the gates i, f, g, o (LSTM) and r, z, n (GRU); ONNX orders them i, o, f, c and z, r, h.
// The weights stay initializers under their state() names; Split and Concat nodes reorder their gate blocks
// (ONNX Runtime folds those constant subgraphs once, at session creation). PyTorch's GRU applies the reset gate
// after the recurrent product (r * (W_hn h + b_hn)): ONNX's linear_before_reset = 1.
#include <tapegrad/framework/onnx/detail/graph.h>

namespace tapegrad::onnx::detail {

namespace {

using Ints = std::vector<std::int64_t>;

// RecurrentKind's values, as reported.
constexpr std::int64_t kTanh = 0, kReLU = 1, kLSTM = 2, kGRU = 3;

void recurrent(Context& c) {
  const std::int64_t kind = c.i("kind");
  if (c.i("proj_size") > 0) c.unsupported("LSTM with proj_size: ONNX's LSTM has no projection");
  if (kind != kTanh && kind != kReLU && kind != kLSTM && kind != kGRU)
    c.unsupported(fmt::format("unknown recurrent kind {}", kind));
  const bool lstm = kind == kLSTM, gru = kind == kGRU;
  const std::int64_t H = c.i("hidden_size"), L = c.i("num_layers"), D = c.i("bidirectional") != 0 ? 2 : 1;
  const bool batch_first = c.i("batch_first") != 0, bias = c.i("bias") != 0;
  const bool batched = c.input_value(0).shape.size() == 3;
  const std::int64_t gates = lstm ? 4 : gru ? 3 : 1;
  const std::vector<std::size_t> order = lstm ? std::vector<std::size_t>{0, 3, 1, 2}
                                         : gru ? std::vector<std::size_t>{1, 0, 2}
                                               : std::vector<std::size_t>{0};
  const char* op_type = lstm ? "LSTM" : gru ? "GRU" : "RNN";

  // ONNX's layout: X [T, B, features], states [D, B, H].
  std::string x = c.input(0);
  if (!batched) x = c.emit("Unsqueeze", {x, c.int64s({1})});
  else if (batch_first) x = c.emit("Transpose", {x}, {{"perm", Ints{1, 0, 2}}});
  auto state = [&](std::size_t i) -> std::string {
    if (!c.has_input(i)) return "";  // ONNX's default initial state is zero, as PyTorch's
    return batched ? c.input(i) : c.emit("Unsqueeze", {c.input(i), c.int64s({1})});
  };
  const std::string h0 = state(1), c0 = lstm ? state(2) : "";

  // [gates * H, ...] in PyTorch's gate order -> ONNX's.
  auto reorder = [&](const std::string& w) {
    if (gates == 1) return w;
    std::vector<std::string> blocks;
    for (std::int64_t g = 0; g < gates; ++g) blocks.push_back(c.fresh("gate"));
    c.emit("Split", {w, c.int64s(Ints(static_cast<std::size_t>(gates), H))}, {{"axis", std::int64_t{0}}}, blocks);
    std::vector<std::string> ordered;
    for (std::size_t g : order) ordered.push_back(blocks[g]);
    return c.emit("Concat", ordered, {{"axis", std::int64_t{0}}});
  };
  // One tensor per direction -> [D, ...].
  auto stack = [&](const std::vector<std::string>& per_direction) {
    std::vector<std::string> rows;
    for (const std::string& t : per_direction) rows.push_back(c.emit("Unsqueeze", {t, c.int64s({0})}));
    return rows.size() == 1 ? rows[0] : c.emit("Concat", rows, {{"axis", std::int64_t{0}}});
  };

  std::vector<std::string> h_n, c_n;
  for (std::int64_t layer = 0; layer < L; ++layer) {
    std::vector<std::string> w, r, b;
    for (std::int64_t d = 0; d < D; ++d) {
      const std::string suffix = fmt::format("_l{}{}", layer, d == 1 ? "_reverse" : "");
      w.push_back(reorder(c.tensor("weight_ih" + suffix)));
      r.push_back(reorder(c.tensor("weight_hh" + suffix)));
      if (bias)
        b.push_back(c.emit("Concat", {reorder(c.tensor("bias_ih" + suffix)), reorder(c.tensor("bias_hh" + suffix))},
                           {{"axis", std::int64_t{0}}}));
    }
    auto layer_state = [&](const std::string& s) {
      return s.empty() ? s : c.emit("Slice", {s, c.int64s({layer * D}), c.int64s({(layer + 1) * D}), c.int64s({0})});
    };
    std::vector<std::string> inputs{x, stack(w), stack(r), bias ? stack(b) : "", "", layer_state(h0)};
    if (lstm) inputs.push_back(layer_state(c0));
    std::vector<Attr> attributes{{"hidden_size", H}, {"direction", std::string(D == 2 ? "bidirectional" : "forward")}};
    if (gru) attributes.push_back({"linear_before_reset", std::int64_t{1}});
    // ONNX's RNN defaults to Tanh; a ReLU RNN names its activation, once per direction.
    if (kind == kReLU) attributes.push_back({"activations", std::vector<std::string>(static_cast<std::size_t>(D), "Relu")});
    std::vector<std::string> outputs{c.fresh(std::string(op_type) + "_Y"), c.fresh(std::string(op_type) + "_Y_h")};
    if (lstm) outputs.push_back(c.fresh("LSTM_Y_c"));
    c.emit(op_type, inputs, attributes, outputs);
    // Y [T, D, B, H] -> [T, B, D * H]: the directions side by side, forward first, as PyTorch's output.
    x = c.emit("Reshape", {c.emit("Transpose", {outputs[0]}, {{"perm", Ints{0, 2, 1, 3}}}), c.int64s({0, 0, -1})});
    h_n.push_back(outputs[1]);
    if (lstm) c_n.push_back(outputs[2]);
  }

  // The layer's outputs in the caller's layout: output, then h_n [L * D, B, H] (and c_n) when reported.
  auto finish = [&](const std::string& value, bool time_major_output, std::size_t out) {
    if (!batched) c.emit("Squeeze", {value, c.int64s({1})}, {}, {c.output(out)});
    else if (time_major_output && batch_first) c.emit("Transpose", {value}, {{"perm", Ints{1, 0, 2}}}, {c.output(out)});
    else c.emit("Identity", {value}, {}, {c.output(out)});
  };
  auto layers = [&](const std::vector<std::string>& per_layer) {
    return per_layer.size() == 1 ? per_layer[0] : c.emit("Concat", per_layer, {{"axis", std::int64_t{0}}});
  };
  finish(x, true, 0);
  if (c.output_count() > 1) finish(layers(h_n), false, 1);
  if (c.output_count() > 2) finish(layers(c_n), false, 2);
}

}  // namespace

// converters_attention.cpp: scaled_dot_product_attention, registered with the recurrent layers (the sequence models).
void add_attention_converters(std::map<std::string, Converter>& table);

void add_recurrent_converters(std::map<std::string, Converter>& table) {
  table["nn.recurrent"] = recurrent;
  add_attention_converters(table);
}

}  // namespace tapegrad::onnx::detail
