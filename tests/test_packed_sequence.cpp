// Variable-length batches: PackedSequence, pack_padded_sequence / pad_packed_sequence / pack_sequence /
// pad_sequence, and RNN / LSTM / GRU over packed batches, against PyTorch 1.13's numbers in
// tests/data/packed_reference.txt (tests/reference/make_packed_reference.py): packed outputs, padded outputs,
// h_n, c_n and the gradients of the padded input, h0, c0 and every parameter in float64 (1e-10) and float32
// (PyTorch's float32 tolerance); round trips,
// torch's error messages, and a float64 gradcheck property of a packed LSTM layer.
#include <algorithm>
#include <functional>
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

void check_case(const std::string& name, DType dtype, double rtol, double atol) {
  INFO(name << " in " << dtype_name(dtype));
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
  m->to(dtype);

  const Tensor x = at(name + "/input").to(dtype).clone().requires_grad_(true);
  const Tensor h0 = has(name + "/h0") ? at(name + "/h0").to(dtype).clone().requires_grad_(true) : Tensor();
  const Tensor c0 = has(name + "/c0") ? at(name + "/c0").to(dtype).clone().requires_grad_(true) : Tensor();
  auto close = [&](const Tensor& got, const std::string& key) {
    return allclose(got.to(DType::Float64), at(key), rtol, atol);
  };
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
  CHECK(close(padded, name + "/padded"));
  CHECK(integers(lengths) == integers(at(name + "/padded_lengths")));
  Tensor loss = zeros({}, TensorOptions{}.with_dtype(dtype));
  for (const auto& [field, t] : {std::pair{"data", out.output.data}, {"h_n", out.h_n}, {"c_n", out.c_n}}) {
    const std::string key = name + "/" + field;
    CHECK(t.defined() == has(key));
    if (!t.defined()) continue;
    CHECK(close(t, key));
    loss = add(loss, sum(mul(t, at(name + "/w_" + field).to(dtype))));
  }
  loss.backward();
  CHECK(close(x.grad(), name + "/grad_input"));
  if (h0.defined()) CHECK(close(h0.grad(), name + "/grad_h0"));
  if (c0.defined()) CHECK(close(c0.grad(), name + "/grad_c0"));
  for (const auto& [pname, p] : m->named_parameters()) {
    INFO(pname);
    REQUIRE(p.grad().defined());
    CHECK(close(p.grad(), name + "/grad/" + pname));
  }
}

}  // namespace

TEST_CASE("packed RNN, LSTM and GRU match PyTorch's outputs, states and gradients in float64") {
  const std::set<std::string> names = cases();
  REQUIRE(names.size() == 64);
  for (const std::string& name : names) check_case(name, DType::Float64, 1e-10, 1e-12);
}

TEST_CASE("packed RNN, LSTM and GRU match PyTorch within float32 tolerance") {
  // Note: torch.testing.assert_close's float32 defaults are rtol 1.3e-6, atol 1e-5.
  for (const std::string& name : cases()) check_case(name, DType::Float32, 1.3e-6, 1e-5);
}

namespace {

// Random lengths in [1, T] for B sequences, sorted non-increasing when `sorted`.
std::vector<std::int64_t> gen_lengths(std::int64_t T, std::int64_t B, bool sorted) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t b = 0; b < B; ++b) lengths.push_back(*rc::gen::inRange<std::int64_t>(1, T + 1));
  if (sorted) std::sort(lengths.begin(), lengths.end(), std::greater<>());
  return lengths;
}

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

}  // namespace

TEST_CASE("pad_packed_sequence inverts pack_padded_sequence, and pack_sequence packs like it") {
  rc::prop("round trip over random lengths, layouts and trailing dims", [] {
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 6), B = *rc::gen::inRange<std::int64_t>(1, 5);
    const bool batch_first = *rc::gen::arbitrary<bool>(), enforce_sorted = *rc::gen::arbitrary<bool>();
    const std::int64_t F = *rc::gen::inRange<std::int64_t>(1, 3);
    const bool features = *rc::gen::arbitrary<bool>();  // [T, B, F] or plain [T, B]
    const std::vector<std::int64_t> lengths = gen_lengths(T, B, enforce_sorted);
    Shape shape = batch_first ? Shape{B, T} : Shape{T, B};
    if (features) shape.push_back(F);
    const Tensor x = *gen::tensor_of_shape(shape);
    const nn::PackedSequence p = nn::pack_padded_sequence(x, lengths, batch_first, enforce_sorted);
    std::int64_t total = 0, longest = 0;
    for (std::int64_t n : lengths) total += n, longest = std::max(longest, n);
    RC_ASSERT(p.data.size(0) == total);
    RC_ASSERT(p.batch_sizes.size(0) == longest);
    RC_ASSERT(p.sorted_indices.defined() == !enforce_sorted);
    const std::int64_t total_length = *rc::gen::inRange<std::int64_t>(longest, T + 2);
    const auto [padded, out_lengths] = nn::pad_packed_sequence(p, batch_first, -7.5, total_length);
    RC_ASSERT(integers(out_lengths) == lengths);
    RC_ASSERT(padded.size(batch_first ? 1 : 0) == total_length);
    const Tensor tb = batch_first ? padded.transpose(0, 1) : padded, xt = batch_first ? x.transpose(0, 1) : x;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < total_length; ++t) {
        const Tensor got = tb.select(0, t).select(0, b);
        if (t < lengths[static_cast<std::size_t>(b)]) RC_ASSERT(testing::identical(got, xt.select(0, t).select(0, b)));
        else RC_ASSERT(got.to_vector() == std::vector<double>(static_cast<std::size_t>(got.numel()), -7.5));
      }
    // pack_sequence of the unpadded pieces packs the same data.
    std::vector<Tensor> pieces;
    for (std::int64_t b = 0; b < B; ++b) pieces.push_back(xt.select(1, b).narrow(0, 0, lengths[static_cast<std::size_t>(b)]));
    const nn::PackedSequence q = nn::pack_sequence(pieces, enforce_sorted);
    RC_ASSERT(testing::identical(q.data, p.data));
    RC_ASSERT(integers(q.batch_sizes) == integers(p.batch_sizes));
    const Tensor padded_pieces = nn::pad_sequence(pieces, batch_first, -7.5);
    RC_ASSERT(testing::identical(padded_pieces, nn::pad_packed_sequence(p, batch_first, -7.5).first));
  });
}

TEST_CASE("gradients flow through pack_padded_sequence and pad_packed_sequence") {
  rc::prop("gradcheck of pad(pack(x))", [] {
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 4), B = *rc::gen::inRange<std::int64_t>(1, 4);
    const bool batch_first = *rc::gen::arbitrary<bool>();
    const std::vector<std::int64_t> lengths = gen_lengths(T, B, false);
    const Tensor x = *gen::tensor_of_shape(batch_first ? Shape{B, T, 2} : Shape{T, B, 2});
    const TensorFunction f = [&](const std::vector<Tensor>& v) {
      const nn::PackedSequence p = nn::pack_padded_sequence(v[0], lengths, batch_first, false);
      return cat({flat(p.data), flat(nn::pad_packed_sequence(p, batch_first, 1.5, T + 1).first)}, 0);
    };
    TAPEGRAD_RC_GRADCHECK(f, std::vector{x});
  });
}

TEST_CASE("a packed LSTM layer's gradients match finite differences") {
  rc::prop("gradcheck of LSTM over a packed batch: input, h0, c0", [] {
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 4), B = *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t layers = *rc::gen::inRange<std::int64_t>(1, 3), hidden = *rc::gen::inRange<std::int64_t>(2, 4);
    const std::int64_t proj = *rc::gen::inRange<std::int64_t>(0, hidden), D = *rc::gen::arbitrary<bool>() ? 2 : 1;
    const bool enforce_sorted = *rc::gen::arbitrary<bool>();
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    nn::LSTM lstm(nn::LSTMOptions(2, hidden).with_num_layers(layers).with_bidirectional(D == 2).with_proj_size(proj)
                      .with_dtype(DType::Float64).with_generator(g));
    const std::vector<std::int64_t> lengths = gen_lengths(T, B, enforce_sorted);
    const std::int64_t P = proj > 0 ? proj : hidden;
    const Tensor x = *gen::tensor_of_shape({T, B, 2});
    const Tensor h0 = *gen::tensor_of_shape({layers * D, B, P}), c0 = *gen::tensor_of_shape({layers * D, B, hidden});
    const TensorFunction f = [&](const std::vector<Tensor>& v) {
      const nn::PackedLSTMResult r =
          lstm.forward_with_state(nn::pack_padded_sequence(v[0], lengths, false, enforce_sorted), v[1], v[2]);
      return cat({flat(r.output.data), flat(r.h_n), flat(r.c_n)}, 0);
    };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector{x, h0, c0}));
  });
}

TEST_CASE("each sequence of a packed batch runs as if alone, and equal lengths run as the padded batch") {
  rc::prop("packed rows equal single-sequence runs (every kind, bidirectional, 2 layers)", [] {
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 5), B = *rc::gen::inRange<std::int64_t>(1, 4);
    const int kind = *rc::gen::inRange(0, 3);
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    std::shared_ptr<nn::RecurrentBase> m;
    if (kind == 0) m = std::make_shared<nn::RNN>(nn::RNNOptions(2, 3).with_num_layers(2).with_bidirectional(true).with_dtype(DType::Float64).with_generator(g));
    else if (kind == 1) m = std::make_shared<nn::GRU>(nn::GRUOptions(2, 3).with_num_layers(2).with_bidirectional(true).with_dtype(DType::Float64).with_generator(g));
    else m = std::make_shared<nn::LSTM>(nn::LSTMOptions(2, 3).with_num_layers(2).with_bidirectional(true).with_dtype(DType::Float64).with_generator(g));
    auto run = [&](const auto& input) {
      if (kind == 0) return dynamic_cast<nn::RNN&>(*m).forward_with_state(input).output;
      if (kind == 1) return dynamic_cast<nn::GRU&>(*m).forward_with_state(input).output;
      return dynamic_cast<nn::LSTM&>(*m).forward_with_state(input).output;
    };
    const std::vector<std::int64_t> lengths = gen_lengths(T, B, false);
    const Tensor x = *gen::tensor_of_shape({T, B, 2});
    const Tensor padded = nn::pad_packed_sequence(run(nn::pack_padded_sequence(x, lengths, false, false))).first;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t L = lengths[static_cast<std::size_t>(b)];
      const Tensor alone = run(x.narrow(0, 0, L).narrow(1, b, 1));  // [L, 1, 6]
      RC_ASSERT(testing::allclose(padded.narrow(0, 0, L).narrow(1, b, 1), alone, 1e-12, 1e-13));
    }
  });
}

TEST_CASE("dropout between layers works on packed data: equal lengths give the padded batch's numbers") {
  auto make = [] {
    Generator g(5);
    return nn::LSTM(nn::LSTMOptions(3, 4).with_num_layers(3).with_bidirectional(true).with_dropout(0.5)
                        .with_dropout_seed(11).with_dtype(DType::Float64).with_generator(g));
  };
  nn::LSTM padded_layer = make(), packed_layer = make();
  const Tensor x = randn({5, 2, 3}, default_generator(), f64);
  for (int call = 0; call < 2; ++call) {  // the dropout stream advances alike
    const nn::LSTMResult a = padded_layer.forward_with_state(x);
    const nn::PackedLSTMResult b = packed_layer.forward_with_state(nn::pack_padded_sequence(x, {5, 5}));
    CHECK(testing::allclose(b.output.data, a.output.reshape({10, 8}), 1e-13, 1e-14));
    CHECK(testing::allclose(b.h_n, a.h_n, 1e-13, 1e-14));
    CHECK(testing::allclose(b.c_n, a.c_n, 1e-13, 1e-14));
  }
  // ... and the masks are really applied: training-mode outputs differ from eval mode's.
  const Tensor trained = packed_layer.forward_with_state(nn::pack_padded_sequence(x, {5, 4}, false)).output.data;
  packed_layer.eval();
  const Tensor evaluated = packed_layer.forward_with_state(nn::pack_padded_sequence(x, {5, 4}, false)).output.data;
  CHECK_FALSE(testing::allclose(trained, evaluated));
}

TEST_CASE("a packed batch is one recurrent tape record per layer and direction, whatever the lengths") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).with_num_layers(2).with_bidirectional(true));
  auto records = [&](std::int64_t T) {
    prune_tape();
    const Tensor x = randn({T, 3, 3}).requires_grad_(true);
    const std::size_t before = tape_size();
    const nn::PackedLSTMResult r = lstm.forward_with_state(nn::pack_padded_sequence(x, {1, T, T / 2 + 1}, false, false));
    return tape_size() - before;
  };
  CHECK(records(2) == records(40));
  CHECK(records(40) <= 50);
}

TEST_CASE("packing refuses what PyTorch refuses, with its messages") {
  const Tensor x = randn({4, 3, 2});
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {4, 2, 3}),
                    Catch::Contains("`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                                    "True. You can pass `enforce_sorted=False`"));
  CHECK_NOTHROW(nn::pack_padded_sequence(x, {4, 2, 3}, false, false));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {4, 0, 3}, false, false),
                    Catch::Contains("Length of all samples has to be greater than 0, but found an element in "
                                    "'lengths' that is <= 0"));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {4, 3, -1}),
                    Catch::Contains("Length of all samples has to be greater than 0"));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {5, 2, 1}), Catch::Contains("a length (5) exceeds the input's 4 time steps"));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {4, 2}),
                    Catch::Contains("Expected `len(lengths)` to be equal to batch_size, but got 2 (batch_size=3)"));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, {3, 2, 1}, true),  // batch_first: 4 sequences of 3 steps
                    Catch::Contains("Expected `len(lengths)` to be equal to batch_size, but got 3 (batch_size=4)"));
  CHECK_THROWS_WITH(nn::pack_padded_sequence(x, from_vector(std::vector<double>{4, 2, 1}, {3})),
                    Catch::Contains("expected lengths as a 1-D int64 tensor"));
  CHECK(integers(nn::pack_padded_sequence(x, from_vector(std::vector<std::int64_t>{4, 2, 1}, {3})).batch_sizes) ==
        std::vector<std::int64_t>{3, 2, 1, 1});
  const nn::PackedSequence p = nn::pack_padded_sequence(x, {4, 2, 1});
  CHECK_THROWS_WITH(nn::pad_packed_sequence(p, false, 0.0, 3),
                    Catch::Contains("Expected total_length to be at least the length of the longest sequence in "
                                    "input, but got total_length=3 and max sequence length being 4"));
  CHECK_THROWS_WITH(nn::pack_sequence({}), Catch::Contains("received an empty list of sequences"));
  CHECK_THROWS_WITH(nn::pack_sequence({randn({2, 3}), randn({3, 3})}),
                    Catch::Contains("`lengths` array must be sorted in decreasing order"));
  CHECK_THROWS_WITH(nn::pad_sequence({randn({2, 3}), randn({3, 2})}), Catch::Contains("trailing shape"));
  nn::PackedSequence broken = p;
  broken.batch_sizes = from_vector(std::vector<std::int64_t>{2, 3}, {2});
  CHECK_THROWS_WITH(nn::pad_packed_sequence(broken), Catch::Contains("non-increasing"));
  nn::GRU gru(3, 4);
  CHECK_THROWS_WITH(gru.forward_with_state(nn::pack_padded_sequence(x, {4, 2, 1})),
                    Catch::Contains("input.size(-1) must be equal to input_size. Expected 3, got 2"));
  nn::LSTM lstm(2, 4);
  CHECK_THROWS_WITH(lstm.forward_with_state(p, zeros({1, 2, 4}), zeros({1, 2, 4})),
                    Catch::Contains("expected hidden state h0 of size [1, 3, 4]"));
  CHECK_THROWS_WITH(lstm.forward_with_state(p, zeros({1, 3, 4})), Catch::Contains("give both h0 and c0"));
  // The op checks what the layers pass it.
  CHECK_THROWS_WITH(recurrent_sequence(RecurrentKind::GRU, randn({6, 12}), randn({12, 4}), Tensor(), zeros({3, 4}),
                                       Tensor(), Tensor(), false, true, {3, 1, 2}),
                    Catch::Contains("batch_sizes must be positive and non-increasing"));
  CHECK_THROWS_WITH(recurrent_sequence(RecurrentKind::GRU, randn({7, 12}), randn({12, 4}), Tensor(), zeros({3, 4}),
                                       Tensor(), Tensor(), false, true, {3, 2, 1}),
                    Catch::Contains("expected input_projection [6 (the sum of batch_sizes), 3 * hidden_size]"));
}
