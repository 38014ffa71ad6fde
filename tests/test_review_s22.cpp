// Review of session 22 (sequence models, in-place autograd, module holders, streaming data): each case is a
// defect found by the review, compared with PyTorch 1.13 (the script that printed its numbers is quoted).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/error_of.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::error_of;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// Deterministic values (no random stream to match with PyTorch's): sin(0.7 i + phase) / 2.
Tensor ramp(const Shape& shape, double phase = 0.0) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * std::sin(0.7 * static_cast<double>(i) + phase);
  return from_vector(v, shape, f64);
}

}  // namespace

// Found: RNN, GRU and LSTM read their outputs back in backward (h_prev of each step; tanh's derivative) from the
// record's output tensor itself, which is what the caller gets; writing into it (out.mul_(2), relu_(out)) before
// backward gave silently wrong gradients (RNN's input gradient off by up to 1.9). PyTorch 1.13 gives the right
// gradient (its CPU layers are composite ops and the output a fresh stack):
//   m = torch.nn.RNN(3, 4).double(); out = m(x)[0]; out.mul_(2.0); out.sum().backward()  # == (2 * out).sum()
// tapegrad now refuses the backward by name instead, as it refuses a modified h0 or weight.
TEST_CASE("a recurrent layer's output written in place: backward gives the right gradients or refuses by name") {
  for (const char* kind : {"rnn_tanh", "gru", "lstm"}) {
    CAPTURE(kind);
    std::shared_ptr<nn::Module> m;
    if (kind[0] == 'r') m = std::make_shared<nn::RNN>(nn::RNNOptions(3, 4).with_dtype(DType::Float64));
    if (kind[0] == 'g') m = std::make_shared<nn::GRU>(nn::GRUOptions(3, 4).with_dtype(DType::Float64));
    if (kind[0] == 'l') m = std::make_shared<nn::LSTM>(nn::LSTMOptions(3, 4).with_dtype(DType::Float64));
    // The gradients of the input and every parameter of sum(2 * output), the doubling in place or not.
    auto gradients = [&](bool in_place) {
      m->zero_grad();
      Tensor x = ramp({5, 2, 3}).requires_grad_();
      Tensor out = m->forward(x);
      if (in_place) out.mul_(2.0);
      else out = out * 2.0;
      sum(out).backward();
      std::vector<Tensor> all{x.grad()};
      for (const Tensor& p : m->parameters()) all.push_back(p.grad().clone());
      return all;
    };
    const std::vector<Tensor> expected = gradients(false);
    std::vector<Tensor> got;
    const std::string error = error_of([&] { got = gradients(true); });
    if (error == "<no error>") {
      REQUIRE(got.size() == expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(max(abs(got[i] - expected[i])).item() < 1e-12);
    } else {
      CHECK_THAT(error, Catch::Contains(std::string("backward of ") + kind) && Catch::Contains("modified in place"));
    }
  }
}

// Found: MultiheadAttention's training self-attention path (packed_self_attention) kept the caller's additive
// attn_mask by reference without its version, and its backward recomputes the weights from it: a mask written
// in place between forward and backward (a reused mask buffer) gave silently wrong gradients (off by 467 here).
// PyTorch 1.13's gradient does not depend on the mask after forward (baddbmm's backward does not read it):
//   mha = torch.nn.MultiheadAttention(4, 2).double(); mha.train()
//   out = mha(x, x, x, attn_mask=mask, need_weights=False)[0]; mask.fill_(5.0); (out*out).sum().backward()
//   # x.grad identical to the run without fill_ (max difference 0.0)
// tapegrad now refuses that backward by name (the general path, scaled_dot_product_attention, already did).
TEST_CASE("MultiheadAttention's additive mask written in place before backward: refused, never a wrong gradient") {
  for (const bool training : {true, false}) {
    CAPTURE(training);
    auto gradient = [&](bool modify) {
      Generator init(7);  // the same parameters in both runs
      nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(4, 2).with_dtype(DType::Float64).with_generator(init));
      if (!training) mha.eval();
      Tensor x = ramp({3, 2, 4}).requires_grad_();
      Tensor mask = ramp({3, 3}, 1.0);
      Tensor out = mha.forward_with_weights(x, x, x, AttentionMask(), false, AttentionMask::additive(mask)).attn_output;
      if (modify) mask.fill_(5.0);
      sum(out * out).backward();
      return x.grad();
    };
    const Tensor expected = gradient(false);
    Tensor got;
    const std::string error = error_of([&] { got = gradient(true); });
    if (error == "<no error>") CHECK(max(abs(got - expected)).item() < 1e-12);
    else CHECK_THAT(error, Catch::Contains("attention") && Catch::Contains("modified in place"));
  }
}

// Found: an in-place op whose operand lies in the target's own storage, partly overlapping it, read the values
// it had already overwritten: x[1:].copy_(x[:-1]) filled x with x[0] (0,0,0,0,0,0), x[1:].add_(x[:-1]) made a
// running sum (0,1,3,6,10,15), x[1:].mul_(x[:-1]) zeros, x.index_put_({perm}, x) all x[0]. PyTorch 1.13 refuses
// them all:
//   x = torch.arange(6.); x[1:].copy_(x[:-1])  # RuntimeError: unsupported operation: some elements of the input
//                                              # tensor and the written-to tensor refer to a single memory location
// tapegrad now reads such an operand from a copy, so each gives what it says (or it may refuse, as PyTorch).
TEST_CASE("in-place ops whose operand partly overlaps the target compute from the operand's previous values") {
  const std::vector<double> start{0, 1, 2, 3, 4, 5};
  struct Case {
    const char* name;
    std::function<void(Tensor&)> write;
    std::vector<double> expected;
  };
  const std::vector<Case> cases{
      {"copy_ right", [](Tensor& x) { x.narrow(0, 1, 5).copy_(x.narrow(0, 0, 5)); }, {0, 0, 1, 2, 3, 4}},
      {"copy_ left", [](Tensor& x) { x.narrow(0, 0, 5).copy_(x.narrow(0, 1, 5)); }, {1, 2, 3, 4, 5, 5}},
      {"add_", [](Tensor& x) { x.narrow(0, 1, 5).add_(x.narrow(0, 0, 5)); }, {0, 1, 3, 5, 7, 9}},
      {"sub_", [](Tensor& x) { x.narrow(0, 1, 5).sub_(x.narrow(0, 0, 5), 2.0); }, {0, 1, 0, -1, -2, -3}},
      {"mul_", [](Tensor& x) { x.narrow(0, 1, 5).mul_(x.narrow(0, 0, 5)); }, {0, 0, 2, 6, 12, 20}},
      {"div_", [](Tensor& x) { x.narrow(0, 0, 5).div_(x.narrow(0, 1, 5)); }, {0, 0.5, 2.0 / 3, 0.75, 0.8, 5}},
      // A row of the target broadcast over it: x [2, 3] += x[0].
      {"add_ broadcast row", [](Tensor& x) { x.view({2, 3}).add_(x.narrow(0, 0, 3)); }, {0, 2, 4, 3, 5, 7}},
      // Still allowed and unchanged: the operand is the target itself, or a disjoint part of its storage.
      {"add_ itself", [](Tensor& x) { x.add_(x); }, {0, 2, 4, 6, 8, 10}},
      {"copy_ disjoint", [](Tensor& x) { x.narrow(0, 0, 3).copy_(x.narrow(0, 3, 3)); }, {3, 4, 5, 3, 4, 5}},
      // index_put_ with the target's own values (x[perm] = x): was all x[0].
      {"index_put_ permutation",
       [](Tensor& x) { x.index_put_({from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 0}, {6})}, x); },
       {5, 0, 1, 2, 3, 4}},
      {"index_put_ slice", [](Tensor& x) { x.index_put_({indexing::Slice(1, 6)}, x.narrow(0, 0, 5)); }, {0, 0, 1, 2, 3, 4}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Tensor x = from_vector(start, {6}, f64);
    const std::string error = error_of([&] { c.write(x); });
    if (error == "<no error>") CHECK(x.to_vector() == c.expected);
    else CHECK_THAT(error, Catch::Contains("memory location"));
  }
}

// Found: masked_fill_'s backward read the caller's mask tensor as it was at backward time, not as the op used it:
// writing into the mask between the op and backward (a reused mask buffer) changed the gradient silently.
// PyTorch 1.13 refuses that backward:
//   y = x * 1; m = x.detach() > 0; y.masked_fill_(m, 0.0); m.fill_(False); y.sum().backward()
//   # RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation
// tapegrad now keeps the mask's values as used, so the gradient is the one of the op that ran.
TEST_CASE("masked_fill_'s gradient uses the mask as the op used it") {
  Tensor x = tensor({-1, 2, -3}, {3}, f64).requires_grad_();
  Tensor y = x * 1.0;
  Tensor mask = gt(x.detach(), 0.0);
  y.masked_fill_(mask, 0.0);
  mask.fill_(0.0);
  const std::string error = error_of([&] { sum(y).backward(); });
  if (error == "<no error>") CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 1});
  else CHECK_THAT(error, Catch::Contains("masked_fill_") && Catch::Contains("modified in place"));
}

TEST_CASE("index_put and index_put_ differentiate through the indices they used") {
  for (const bool in_place : {false, true}) {
    CAPTURE(in_place);
    Tensor x = tensor({1, 2, 3}, {3}, f64).requires_grad_();
    Tensor v = tensor({10}, {1}, f64).requires_grad_();
    Tensor index = from_vector(std::vector<std::int64_t>{0}, {1});
    Tensor y = x * 1.0;
    Tensor z = in_place ? y.index_put_({index}, v) : index_put(y, {index}, v);
    index.fill_(2.0);
    const std::string error = error_of([&] { sum(z * tensor({1, 2, 3}, {3}, f64)).backward(); });
    if (error == "<no error>") {
      CHECK(x.grad().to_vector() == std::vector<double>{0, 2, 3});
      CHECK(v.grad().to_vector() == std::vector<double>{1});
    } else {
      CHECK_THAT(error, Catch::Contains("index_put") && Catch::Contains("modified in place"));
    }
  }
}

// Found: a batch of 0 sequences (a [0, T, I] batch_first input: an empty shard or last batch) made RNN, LSTM and GRU
// throw an error about the internal op ("rnn_tanh: expected input_projection [T >= 1, B >= 1, ...]"), and the
// cells likewise. PyTorch 1.13 returns empty outputs and states, and zero gradients:
//   m = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True); r = m(torch.zeros(0, 5, 3))
//   # r[0]: [0, 5, 8], h_n and c_n: [4, 0, 4]; r[0].sum().backward() gives every parameter a zero gradient
//   torch.nn.LSTMCell(3, 4)(torch.zeros(0, 3))  # h, c: [0, 4]
TEST_CASE("recurrent layers and cells take a batch of 0 sequences as PyTorch does") {
  for (const char* kind : {"rnn", "lstm", "gru"}) {
    CAPTURE(kind);
    std::shared_ptr<nn::RecurrentBase> m;
    auto configure = [](auto options) {
      return options.with_num_layers(2).with_bidirectional(true).with_batch_first(true).with_dtype(DType::Float64);
    };
    if (kind[0] == 'r') m = std::make_shared<nn::RNN>(configure(nn::RNNOptions(3, 4)));
    if (kind[0] == 'l') m = std::make_shared<nn::LSTM>(configure(nn::LSTMOptions(3, 4)));
    if (kind[0] == 'g') m = std::make_shared<nn::GRU>(configure(nn::GRUOptions(3, 4)));
    Tensor x = zeros({0, 5, 3}, f64).requires_grad_();
    Tensor output, h_n, c_n;
    if (auto* lstm = dynamic_cast<nn::LSTM*>(m.get())) {
      nn::LSTMResult r = lstm->forward_with_state(x);
      output = r.output, h_n = r.h_n, c_n = r.c_n;
    } else if (auto* rnn = dynamic_cast<nn::RNN*>(m.get())) {
      nn::RNNResult r = rnn->forward_with_state(x);
      output = r.output, h_n = r.h_n;
    } else {
      nn::RNNResult r = dynamic_cast<nn::GRU&>(*m).forward_with_state(x);
      output = r.output, h_n = r.h_n;
    }
    CHECK(output.shape() == Shape{0, 5, 8});
    CHECK(h_n.shape() == Shape{4, 0, 4});
    if (c_n.defined()) CHECK(c_n.shape() == Shape{4, 0, 4});
    sum(output).backward();
    CHECK(x.grad().shape() == Shape{0, 5, 3});
    for (const auto& [name, p] : m->named_parameters()) {
      CAPTURE(name);
      REQUIRE(p.grad().defined());
      CHECK(max(abs(p.grad())).item() == 0.0);
    }
  }
  nn::LSTMCell cell(nn::LSTMCellOptions(3, 4));
  nn::LSTMCellState state = cell.forward_with_state(zeros({0, 3}), Tensor(), Tensor());
  CHECK(state.h.shape() == Shape{0, 4});
  CHECK(state.c.shape() == Shape{0, 4});
  CHECK(nn::GRUCell(nn::GRUCellOptions(3, 4)).forward_with_state(zeros({0, 3}), Tensor()).shape() == Shape{0, 4});
}

// Found: pack_padded_sequence of a batch of 0 sequences read the first element of an empty order (undefined
// behaviour: std::vector::front() of an empty vector). PyTorch 1.13 refuses it:
//   pack_padded_sequence(torch.zeros(5, 0, 3), torch.zeros(0, dtype=torch.int64))
//   # RuntimeError: Cannot pack empty tensors.
TEST_CASE("pack_padded_sequence refuses a batch of 0 sequences with PyTorch's message") {
  for (const bool enforce_sorted : {true, false}) {
    CAPTURE(enforce_sorted);
    CHECK_THAT(error_of([&] { nn::pack_padded_sequence(zeros({5, 0, 3}), std::vector<std::int64_t>{}, false, enforce_sorted); }),
               Catch::Contains("pack_padded_sequence: Cannot pack empty tensors"));
    CHECK_THAT(error_of([&] { nn::pack_padded_sequence(zeros({0, 5, 3}), std::vector<std::int64_t>{}, true, enforce_sorted); }),
               Catch::Contains("pack_padded_sequence: Cannot pack empty tensors"));
  }
}

// Found: a CSV file starting with a UTF-8 byte order mark (Excel's "CSV UTF-8" export) could not name its first
// column: the mark became part of the name, and CsvDataset refused with "line 1 (header) has no column 'label'"
// for a file whose first line reads "label,x" (pandas.read_csv skips the mark). The mark is skipped now, and the
// refusal lists the header's columns.
TEST_CASE("CsvDataset skips a UTF-8 byte order mark and names the header's columns when one is missing") {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("tapegrad_review_s22_" + std::to_string(::getpid()) + ".csv");
  std::ofstream(path, std::ios::binary) << "\xEF\xBB\xBFlabel,x\n1,2.5\n0,-1\n";
  data::CsvOptions options;
  options.target = "label";
  std::string error = error_of([&] {
    data::CsvDataset csv(path.string(), options);
    REQUIRE(csv.size() == 2);
    const data::Example row = csv.get(0);
    CHECK(row.data.to_vector() == std::vector<double>{2.5});
    CHECK(row.target.item() == 1.0);
  });
  CHECK(error == "<no error>");
  options.target = "y";
  error = error_of([&] { data::CsvDataset(path.string(), options); });
  CHECK_THAT(error, Catch::Contains("has no column 'y' (its columns: 'label', 'x')"));
  fs::remove(path);
}
