// RNN, LSTM, GRU and their cells against PyTorch 1.13's numbers in tests/data/rnn_reference.txt (written by
// tests/reference/make_rnn_reference.py): outputs, final states and the gradients of the input, the initial
// states and every parameter, in float64 (1e-10) and float32; and a PyTorch-trained LSTM loaded from its .pt.
#include <set>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/framework/serialize/interop.h>
#include <tapegrad/layers/rnn_cell.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::reference_entry;

namespace {

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref = tapegrad::testing::load_reference_file("rnn_reference.txt");
  return ref;
}

const Tensor& at(const std::string& key) { return reference_entry(reference(), key); }
bool has(const std::string& key) { return reference().count(key) == 1; }
std::int64_t integer(const std::string& key) { return static_cast<std::int64_t>(at(key).item()); }

std::set<std::string> cases() {
  std::set<std::string> out;
  for (const auto& [key, value] : reference())
    if (key.ends_with("/kind")) out.insert(key.substr(0, key.size() - 5));
  return out;
}

// A module of the case's kind and options, float64, holding PyTorch's parameters (loaded by state_dict name).
std::shared_ptr<nn::Module> make_module(const std::string& name) {
  const std::int64_t kind = integer(name + "/kind"), in = integer(name + "/input_size"),
                     hidden = integer(name + "/hidden_size"), layers = integer(name + "/num_layers");
  const bool bias = integer(name + "/bias") != 0, batch_first = integer(name + "/batch_first") != 0,
             bidirectional = integer(name + "/bidirectional") != 0;
  std::shared_ptr<nn::Module> m;
  auto common = [&](auto options) {
    return options.with_num_layers(layers).with_bias(bias).with_batch_first(batch_first).with_bidirectional(
        bidirectional);
  };
  const auto relu = nn::RNNNonlinearity::ReLU, tanh = nn::RNNNonlinearity::Tanh;
  switch (kind) {
    case 0:
    case 1: m = std::make_shared<nn::RNN>(common(nn::RNNOptions(in, hidden)).with_nonlinearity(kind == 1 ? relu : tanh)); break;
    case 2: m = std::make_shared<nn::LSTM>(common(nn::LSTMOptions(in, hidden)).with_proj_size(integer(name + "/proj_size"))); break;
    case 3: m = std::make_shared<nn::GRU>(common(nn::GRUOptions(in, hidden))); break;
    case 4:
    case 5: m = std::make_shared<nn::RNNCell>(nn::RNNCellOptions(in, hidden).with_bias(bias).with_nonlinearity(kind == 5 ? relu : tanh)); break;
    case 6: m = std::make_shared<nn::LSTMCell>(nn::LSTMCellOptions(in, hidden).with_bias(bias)); break;
    default: m = std::make_shared<nn::GRUCell>(nn::GRUCellOptions(in, hidden).with_bias(bias)); break;
  }
  m->to(DType::Float64);
  nn::NamedTensors state;
  const std::string prefix = name + "/param/";
  for (const auto& [key, value] : reference())
    if (key.starts_with(prefix)) state.emplace_back(key.substr(prefix.size()), value);
  m->load_state(state);  // strict: every PyTorch name is one of ours and the other way round
  return m;
}

struct Outputs {
  Tensor output, h_n, c_n;
};

Outputs run(nn::Module& m, std::int64_t kind, const Tensor& x, const Tensor& h0, const Tensor& c0) {
  if (kind <= 1) {
    auto r = dynamic_cast<nn::RNN&>(m).forward_with_state(x, h0);
    return {r.output, r.h_n, Tensor()};
  }
  if (kind == 2) {
    auto r = dynamic_cast<nn::LSTM&>(m).forward_with_state(x, h0, c0);
    return {r.output, r.h_n, r.c_n};
  }
  if (kind == 3) {
    auto r = dynamic_cast<nn::GRU&>(m).forward_with_state(x, h0);
    return {r.output, r.h_n, Tensor()};
  }
  if (kind == 6) {
    auto r = dynamic_cast<nn::LSTMCell&>(m).forward_with_state(x, h0, c0);
    return {Tensor(), r.h, r.c};
  }
  if (kind == 7) return {Tensor(), dynamic_cast<nn::GRUCell&>(m).forward_with_state(x, h0), Tensor()};
  return {Tensor(), dynamic_cast<nn::RNNCell&>(m).forward_with_state(x, h0), Tensor()};
}

// One forward and backward of the case in `dtype`, compared with PyTorch's float64 numbers.
void check_case(const std::string& name, DType dtype, double rtol, double atol) {
  INFO(name << " in " << dtype_name(dtype));
  auto m = make_module(name);
  m->to(dtype);
  const std::int64_t kind = integer(name + "/kind");
  const Tensor x = at(name + "/input").to(dtype).clone().requires_grad_(true);
  const Tensor h0 = has(name + "/h0") ? at(name + "/h0").to(dtype).clone().requires_grad_(true) : Tensor();
  const Tensor c0 = has(name + "/c0") ? at(name + "/c0").to(dtype).clone().requires_grad_(true) : Tensor();
  const Outputs out = run(*m, kind, x, h0, c0);
  Tensor loss = zeros({}, TensorOptions{}.with_dtype(dtype));
  for (const auto& [field, t] : {std::pair{"output", out.output}, {"h_n", out.h_n}, {"c_n", out.c_n}}) {
    const std::string key = name + "/" + field;
    CHECK(t.defined() == has(key));
    if (!t.defined()) continue;
    CHECK(allclose(t.to(DType::Float64), at(key), rtol, atol));
    loss = add(loss, sum(mul(t, at(name + "/w_" + field).to(dtype))));
  }
  loss.backward();
  CHECK(allclose(x.grad().to(DType::Float64), at(name + "/grad_input"), rtol, atol));
  if (h0.defined()) CHECK(allclose(h0.grad().to(DType::Float64), at(name + "/grad_h0"), rtol, atol));
  if (c0.defined()) CHECK(allclose(c0.grad().to(DType::Float64), at(name + "/grad_c0"), rtol, atol));
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(allclose(p.grad().to(DType::Float64), at(name + "/grad/" + pname), rtol, atol));
  }
}

}  // namespace

TEST_CASE("RNN, LSTM, GRU and the cells match PyTorch's outputs, states and gradients in float64") {
  const std::set<std::string> names = cases();
  REQUIRE(names.size() == 27);
  for (const std::string& name : names) check_case(name, DType::Float64, 1e-10, 1e-12);
}

TEST_CASE("RNN, LSTM, GRU and the cells match PyTorch within float32 tolerance") {
  // Note: torch.testing.assert_close's float32 defaults are rtol 1.3e-6, atol 1e-5.
  for (const std::string& name : cases()) check_case(name, DType::Float32, 1.3e-6, 1e-5);
}

TEST_CASE("state_dict names and shapes are PyTorch's, in PyTorch's order") {
  nn::LSTM lstm(nn::LSTMOptions(10, 20).with_num_layers(2).with_bidirectional(true).with_proj_size(5));
  std::vector<std::string> names;
  for (const auto& [name, t] : lstm.state()) names.push_back(name);
  const std::vector<std::string> expected = {
      "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_hr_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_hr_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse",
      "weight_hr_l1_reverse"};
  CHECK(names == expected);
  CHECK(lstm.parameter("weight_ih_l1").shape() == Shape{80, 10});  // 2 directions x proj_size 5
  CHECK(lstm.parameter("weight_hh_l0").shape() == Shape{80, 5});
  CHECK(lstm.parameter("weight_hr_l0").shape() == Shape{5, 20});
  nn::GRUCell cell(4, 6);
  CHECK(cell.state().size() == 4);
  CHECK(cell.weight_ih.shape() == Shape{18, 4});
  // Initialisation: every parameter from U(-1/sqrt(hidden), 1/sqrt(hidden)).
  for (const Tensor& p : lstm.parameters())
    for (double v : p.to_vector()) REQUIRE(std::abs(v) <= 1.0 / std::sqrt(20.0));
  CHECK(lstm.repr().find("LSTM(10, 20, proj_size=5, num_layers=2, bidirectional=True)") != std::string::npos);
}

TEST_CASE("a LSTM trained by PyTorch loads from its .pt and reproduces PyTorch's float32 outputs") {
  nn::LSTM lstm(nn::LSTMOptions(4, 6).with_num_layers(2).with_batch_first(true));
  load_pytorch(lstm, std::string(TAPEGRAD_TEST_DATA_DIR) + "/rnn_lstm_trained.pt");
  lstm.eval();
  const Tensor x = at("trained_lstm/input").to(DType::Float32);
  const nn::LSTMResult r = lstm.forward_with_state(x);
  for (const auto& [field, t] : {std::pair{"output", r.output}, {"h_n", r.h_n}, {"c_n", r.c_n}}) {
    INFO(field);
    const Tensor expected = at(std::string("trained_lstm/") + field);
    const Tensor difference = abs(sub(t.to(DType::Float64), expected));
    CHECK(max(difference).item() <= 1e-6 * max(abs(expected)).item());
  }
}
