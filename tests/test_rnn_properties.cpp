// Properties of the recurrent layers: float64 gradcheck with respect to input and initial states over random
// options, the testing kit's module-gradient and buffer-invariance checks, one tape record per layer and
// direction for the recurrent part, dropout between layers, and the errors.
#include <memory>

#include "support/properties.h"
#include <tapegrad/layers/rnn_cell.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// A random small layer (kind 0 RNN tanh, 1 RNN relu, 2 LSTM, 3 GRU), float64.
struct RandomLayer {
  std::shared_ptr<nn::RecurrentBase> layer;
  std::int64_t kind, layers, directions, hidden, state, input;
  bool batch_first;
};

RandomLayer gen_layer(bool allow_dropout = false) {
  RandomLayer r;
  r.kind = *rc::gen::inRange<std::int64_t>(0, 4);
  r.input = *rc::gen::inRange<std::int64_t>(1, 4);
  r.hidden = *rc::gen::inRange<std::int64_t>(1, 4);
  r.layers = *rc::gen::inRange<std::int64_t>(1, 3);
  const bool bidirectional = *rc::gen::arbitrary<bool>();
  r.directions = bidirectional ? 2 : 1;
  r.batch_first = *rc::gen::arbitrary<bool>();
  // Note: a ReLU RNN without bias has pre-activations of exactly 0 whenever its inputs and state are 0 (shrinking
  // drives them there: layer-0 outputs of ReLU(negative) and a 0 in h0), where finite differences see half the
  // slope and the derivative is 0: a kink, not a wrong gradient. Its random bias keeps pre-activations off 0.
  const bool bias = r.kind == 1 || *rc::gen::arbitrary<bool>();
  const std::int64_t proj = r.kind == 2 && r.hidden > 1 ? *rc::gen::inRange<std::int64_t>(0, r.hidden) : 0;
  r.state = proj > 0 ? proj : r.hidden;
  const double dropout = allow_dropout ? 0.5 : 0.0;
  Generator g(*rc::gen::arbitrary<std::uint32_t>());
  auto common = [&](auto o) {
    return o.with_num_layers(r.layers).with_bidirectional(bidirectional).with_batch_first(r.batch_first)
        .with_bias(bias).with_dtype(DType::Float64).with_generator(g).with_dropout(dropout).with_dropout_seed(7);
  };
  if (r.kind == 2) r.layer = std::make_shared<nn::LSTM>(common(nn::LSTMOptions(r.input, r.hidden)).with_proj_size(proj));
  else if (r.kind == 3) r.layer = std::make_shared<nn::GRU>(common(nn::GRUOptions(r.input, r.hidden)));
  else
    r.layer = std::make_shared<nn::RNN>(common(nn::RNNOptions(r.input, r.hidden))
                                            .with_nonlinearity(r.kind == 1 ? nn::RNNNonlinearity::ReLU
                                                                           : nn::RNNNonlinearity::Tanh));
  return r;
}

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

}  // namespace

TEST_CASE("gradients of RNN, LSTM and GRU with respect to input and initial states match finite differences") {
  rc::prop("gradcheck over random kinds, shapes and options", [] {
    const RandomLayer r = gen_layer();
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 5), B = *rc::gen::inRange<std::int64_t>(1, 4);
    const Shape in_shape = r.batch_first ? Shape{B, T, r.input} : Shape{T, B, r.input};
    const Tensor x = *gen::tensor_of_shape(in_shape);
    const Tensor h0 = *gen::tensor_of_shape({r.layers * r.directions, B, r.state});
    const Tensor c0 = *gen::tensor_of_shape({r.layers * r.directions, B, r.hidden});
    const TensorFunction f = [&](const std::vector<Tensor>& v) {
      if (r.kind == 2) {
        const nn::LSTMResult o = dynamic_cast<nn::LSTM&>(*r.layer).forward_with_state(v[0], v[1], v[2]);
        return cat({flat(o.output), flat(o.h_n), flat(o.c_n)}, 0);
      }
      const nn::RNNResult o = r.kind == 3 ? dynamic_cast<nn::GRU&>(*r.layer).forward_with_state(v[0], v[1])
                                          : dynamic_cast<nn::RNN&>(*r.layer).forward_with_state(v[0], v[1]);
      return cat({flat(o.output), flat(o.h_n)}, 0);
    };
    const std::vector<Tensor> inputs = r.kind == 2 ? std::vector{x, h0, c0} : std::vector{x, h0};
    TAPEGRAD_RC_GRADCHECK(f, inputs);
  });
}

TEST_CASE("the testing kit's gradient and buffer checks pass for the recurrent layers and cells") {
  // forward(input) is the output sequence from zero states: the kit's Tensor -> Tensor signature.
  auto shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make_layer = [shape] {
    RandomLayer r = gen_layer();
    const std::int64_t T = *rc::gen::inRange<std::int64_t>(1, 4), B = *rc::gen::inRange<std::int64_t>(1, 3);
    *shape = r.batch_first ? Shape{B, T, r.input} : Shape{T, B, r.input};
    return std::shared_ptr<nn::Module>(r.layer);
  };
  const auto inputs = rc::gen::exec([shape] { return *gen::tensor_of_shape(*shape); });
  tapegrad::testing::check_module_gradients(make_layer, inputs, {.label = "layers"});
  tapegrad::testing::check_buffer_invariance(make_layer, inputs,
                                             {.non_persistent = {"mask_seed", "num_masks_drawn"}, .label = "layers"});

  auto cell_shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make_cell = [cell_shape] {
    const int kind = *rc::gen::inRange(0, 3);
    const std::int64_t in = *rc::gen::inRange<std::int64_t>(1, 4), hidden = *rc::gen::inRange<std::int64_t>(1, 4);
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    const auto o = nn::RNNCellOptions(in, hidden).with_dtype(DType::Float64).with_generator(g).with_bias(*rc::gen::arbitrary<bool>());
    *cell_shape = *rc::gen::arbitrary<bool>() ? Shape{*rc::gen::inRange<std::int64_t>(1, 4), in} : Shape{in};
    if (kind == 0) return std::shared_ptr<nn::Module>(std::make_shared<nn::LSTMCell>(o));
    if (kind == 1) return std::shared_ptr<nn::Module>(std::make_shared<nn::GRUCell>(o));
    return std::shared_ptr<nn::Module>(std::make_shared<nn::RNNCell>(o));
  };
  const auto cell_inputs = rc::gen::exec([cell_shape] { return *gen::tensor_of_shape(*cell_shape); });
  tapegrad::testing::check_module_gradients(make_cell, cell_inputs, {.label = "cells"});
  tapegrad::testing::check_buffer_invariance(make_cell, cell_inputs, {.label = "cells"});
}

TEST_CASE("the recurrent part is one tape record per layer and direction, whatever the sequence length") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).with_num_layers(2).with_bidirectional(true));
  auto records = [&](std::int64_t T) {
    prune_tape();
    const std::size_t before = tape_size();
    const nn::LSTMResult r = lstm.forward_with_state(randn({T, 2, 3}));
    const std::size_t after = tape_size();
    return after - before;
  };
  CHECK(records(1) == records(40));
  // Per layer-direction: the input GEMM (linear), the recurrent op and a few views; per layer a cat; one stack.
  CHECK(records(40) <= 4 * 10);
  // The op itself: one record, whose output is the recurrent op's.
  const Tensor projection = randn({30, 2, 12}).requires_grad_(true);
  const Tensor w = randn({12, 4}).requires_grad_(true), h0 = zeros({2, 4});
  const std::size_t before = tape_size();
  const RecurrentSequence seq = recurrent_sequence(RecurrentKind::GRU, projection, w, Tensor(), h0);
  CHECK(tape_size() - before == 2);  // the record, and h_n: a view (select) of the output
  CHECK(seq.output.grad_fn_name() == "gru");
  const std::size_t middle = tape_size();
  const RecurrentSequence only_output =
      recurrent_sequence(RecurrentKind::GRU, projection, w, Tensor(), h0, Tensor(), Tensor(), false, false);
  CHECK(tape_size() - middle == 1);  // GRU's output is the record's own output
  CHECK_FALSE(only_output.h_n.defined());
}

TEST_CASE("backward with create_graph through the fused recurrent op is refused") {
  nn::GRU gru(nn::GRUOptions(2, 3).with_dtype(DType::Float64));
  const Tensor x = randn({4, 1, 2}, default_generator(), f64).requires_grad_(true);
  const Tensor y = sum(gru(x));
  CHECK_THROWS_WITH(autograd::grad({y}, {x}, {}, false, /*create_graph=*/true),
                    Catch::Contains("first-order backward only"));
}

TEST_CASE("dropout between layers is seeded, advances per training forward, and is off in eval mode") {
  auto make = [] { return nn::LSTM(nn::LSTMOptions(3, 5).with_num_layers(3).with_dropout(0.5).with_dropout_seed(11)); };
  nn::LSTM a = make();
  nn::LSTM b = make();
  b.load_state(a.state());
  const Tensor x = randn({6, 2, 3});
  const Tensor first = a(x), second = a(x);
  CHECK_FALSE(tapegrad::testing::allclose(first, second));     // a new mask each training forward
  CHECK(tapegrad::testing::identical(first, b(x)));             // same seed, same count: same masks
  CHECK(a.num_masks_drawn.item() == 2);
  a.eval();
  b.eval();
  CHECK(tapegrad::testing::identical(a(x), b(x)));
  CHECK(tapegrad::testing::identical(a(x), a(x)));
  CHECK(a.state().size() == 12);  // the dropout stream is not in the state: PyTorch's state_dict loads strictly
}

TEST_CASE("unbatched input, batch_first and bad shapes follow PyTorch") {
  nn::GRU gru(nn::GRUOptions(3, 4).with_num_layers(2));
  const nn::RNNResult r = gru.forward_with_state(randn({5, 3}));
  CHECK(r.output.shape() == Shape{5, 4});
  CHECK(r.h_n.shape() == Shape{2, 4});
  nn::LSTM lstm(nn::LSTMOptions(3, 4).with_batch_first(true).with_bidirectional(true).with_proj_size(2));
  const nn::LSTMResult l = lstm.forward_with_state(randn({2, 7, 3}));
  CHECK(l.output.shape() == Shape{2, 7, 4});
  CHECK(l.h_n.shape() == Shape{2, 2, 2});
  CHECK(l.c_n.shape() == Shape{2, 2, 4});
  CHECK_THROWS_WITH(gru(randn({5, 2, 4})), Catch::Contains("input.size(-1) must be equal to input_size"));
  CHECK_THROWS_WITH(gru.forward_with_state(randn({5, 2, 3}), zeros({1, 2, 4})), Catch::Contains("expected hidden state h0"));
  CHECK_THROWS_WITH(lstm.forward_with_state(randn({2, 7, 3}), zeros({2, 2, 2})), Catch::Contains("give both h0 and c0"));
  CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(3, 4).with_proj_size(4)), Catch::Contains("proj_size has to be smaller"));
  nn::LSTMCell cell(3, 4);
  const nn::LSTMCellState s = cell.forward_with_state(randn({3}), Tensor(), Tensor());
  CHECK(s.h.shape() == Shape{4});
  CHECK(s.c.shape() == Shape{4});
}
