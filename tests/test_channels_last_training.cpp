// A channels-last training step without layout conversions (issue 42, session 21): the gradients that flow
// back through a channels-last network stay channels-last (binary ops' backward, a residual join's sum), a
// Conv2d of a channels-last module runs without copying its weight, gradient sums that nothing else sees are
// added in place, and the optimizers step a channels-last parameter where it lies. Each check compares with the
// row-major run's values.
#include <functional>
#include <memory>
#include <vector>

#include "support/channels_last_cases.h"
#include "support/properties.h"
#include <tapegrad/framework/autograd/function.h>  // record_op: the probe below
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::binary_ops;
using tapegrad::testing::identical;

namespace {

constexpr MemoryFormat CL = MemoryFormat::ChannelsLast;

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

// Channels-last and not also row-major: the layout a conversion to row-major would have destroyed.
bool strictly_channels_last(const Tensor& t) { return t.is_contiguous(CL) && !t.is_contiguous(); }

// The identity, recording the gradient that reaches it: the format an op's backward hands on, seen from the
// op before it. Note: map_floating's copy keeps the format, so the probe itself converts nothing.
Tensor probe(const Tensor& x, std::shared_ptr<std::vector<Tensor>> seen) {
  return record_op("probe", mul(x.detach(), 1.0), {x}, [seen](const Tensor& g, NeedsGrad) {
    seen->push_back(g);
    return std::vector<Tensor>{g};
  });
}


}  // namespace

TEST_CASE("binary ops hand a channels-last gradient back in its format, with the row-major run's values") {
  // Note: PyTorch's add/sub pass the gradient through and mul/div's products follow TensorIterator, so an
  // operand of the output's shape gets a channels-last gradient; sum_to used to return a row-major copy, which
  // the next backward (BatchNorm's, relu's) converted back.
  const Tensor values = add(rand({2, 3, 4, 5}, default_generator(), f64()), 0.5);
  const Tensor other = add(rand({2, 3, 4, 5}, default_generator(), f64()), 0.5);
  const Tensor bias = add(rand({1, 3, 1, 1}, default_generator(), f64()), 0.5);
  const Tensor w = rand({2, 3, 4, 5}, default_generator(), f64());
  for (const auto& [name, op] : binary_ops)
    for (const bool with_bias : {false, true}) {
      INFO(name << (with_bias ? " with a [1, C, 1, 1] operand" : " with a channels-last operand"));
      auto run = [&](MemoryFormat format) {
        const Tensor x = values.contiguous(format).detach().requires_grad_();
        const Tensor y = with_bias ? bias.detach().requires_grad_()
                                   : other.contiguous(format).detach().requires_grad_();
        auto seen_x = std::make_shared<std::vector<Tensor>>(), seen_y = std::make_shared<std::vector<Tensor>>();
        const Tensor out = op(probe(x, seen_x), probe(y, seen_y));
        // Note: the seed in the run's format, so that the gradient reaching `out` is in that format. (sum's
        // backward here materialises a row-major tensor where PyTorch's expands; mul by it would be row-major.)
        out.backward(w.contiguous(format));
        REQUIRE(seen_x->size() == 1);
        REQUIRE(seen_y->size() == 1);
        return std::tuple{out, seen_x->front(), seen_y->front(), x.grad(), y.grad()};
      };
      const auto [out, gx, gy, x_grad, y_grad] = run(CL);
      const auto [out_r, gx_r, gy_r, x_grad_r, y_grad_r] = run(MemoryFormat::Contiguous);
      CHECK(strictly_channels_last(out));
      CHECK(strictly_channels_last(gx));
      if (!with_bias) CHECK(strictly_channels_last(gy));
      CHECK(gy.shape() == (with_bias ? Shape{1, 3, 1, 1} : Shape{2, 3, 4, 5}));
      CHECK(identical(out, out_r));
      CHECK(allclose(gx, gx_r, 1e-14, 0));
      CHECK(allclose(gy, gy_r, 1e-14, 1e-14));
      CHECK(strictly_channels_last(x_grad));  // a leaf's .grad takes the leaf's format
      CHECK(allclose(x_grad, x_grad_r, 1e-14, 0));
      CHECK(allclose(y_grad, y_grad_r, 1e-14, 1e-14));
    }
}

namespace {

// conv3x3-BN-ReLU-conv3x3-BN plus the identity, ReLU: bench/compare's BasicBlock, with probes where the
// gradients arrive: the block's input (a join of two gradients), the residual sum and the first activation.
struct Block {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;

  explicit Block(std::int64_t c) {
    conv1 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{c, c, 3}.with_padding(1).with_bias(false).with_dtype(
        DType::Float64));
    conv2 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{c, c, 3}.with_padding(1).with_bias(false).with_dtype(
        DType::Float64));
    bn1 = std::make_shared<nn::BatchNorm2d>(c);
    bn2 = std::make_shared<nn::BatchNorm2d>(c);
    bn1->to(DType::Float64);
    bn2->to(DType::Float64);
  }
  std::vector<nn::Module*> modules() const { return {conv1.get(), conv2.get(), bn1.get(), bn2.get()}; }
  Tensor forward(const Tensor& x_in, const std::shared_ptr<std::vector<Tensor>>& seen) {
    const Tensor x = probe(x_in, seen);
    const Tensor h = probe(relu(bn1->forward(conv1->forward(x))), seen);
    return relu(probe(add(bn2->forward(conv2->forward(h)), x), seen));
  }
};

}  // namespace

TEST_CASE("a channels-last residual block's backward stays channels-last and matches the row-major block") {
  manual_seed(11);
  Block rows(4), cl(4);
  for (std::size_t i = 0; i < rows.modules().size(); ++i) {
    auto from = rows.modules()[i]->parameters(), to = cl.modules()[i]->parameters();
    for (std::size_t j = 0; j < from.size(); ++j) to[j].set_data(from[j].detach().clone());
    cl.modules()[i]->to(CL);
  }
  const Tensor values = randn({2, 4, 5, 6}, default_generator(), f64());
  const Tensor w = randn({2, 4, 5, 6}, default_generator(), f64());
  auto run = [&](Block& block, MemoryFormat format) {
    const Tensor x = values.contiguous(format).detach().requires_grad_();
    auto seen = std::make_shared<std::vector<Tensor>>();
    const Tensor out = block.forward(x, seen);
    out.backward(w.contiguous(format));
    return std::tuple{out, *seen, x.grad()};
  };
  const auto [out, seen, x_grad] = run(cl, CL);
  const auto [out_r, seen_r, x_grad_r] = run(rows, MemoryFormat::Contiguous);
  CHECK(strictly_channels_last(out));
  CHECK(allclose(out, out_r, 1e-12, 1e-12));
  REQUIRE(seen.size() == 3);  // the residual sum, the first activation, the block's input (backward order)
  for (std::size_t i = 0; i < seen.size(); ++i) {
    INFO("probe " << i);
    CHECK(strictly_channels_last(seen[i]));
    CHECK(allclose(seen[i], seen_r[i], 1e-10, 1e-12));
  }
  CHECK(strictly_channels_last(x_grad));
  CHECK(allclose(x_grad, x_grad_r, 1e-10, 1e-12));
  for (std::size_t i = 0; i < rows.modules().size(); ++i) {
    auto a = rows.modules()[i]->named_parameters(), b = cl.modules()[i]->named_parameters();
    for (std::size_t j = 0; j < a.size(); ++j) {
      INFO("module " << i << " " << a[j].first);
      CHECK(b[j].second.grad().is_contiguous());  // parameters and their .grad stay row-major
      CHECK(allclose(a[j].second.grad(), b[j].second.grad(), 1e-10, 1e-12));
    }
  }
}

TEST_CASE("a Conv2d of a channels-last module records no weight copy when its input decides the format") {
  manual_seed(5);
  nn::Conv2d conv(nn::Conv2dOptions{3, 6, 3}.with_padding(1));
  nn::Conv2d one_channel(nn::Conv2dOptions{1, 6, 3}.with_padding(1));
  nn::Conv2d pointwise(nn::Conv2dOptions{3, 6, 1});
  conv.to(CL);
  one_channel.to(CL);
  pointwise.to(CL);
  const Tensor x = randn({2, 3, 5, 5});
  auto records = [](const std::function<Tensor()>& f, Tensor& out) {
    const std::size_t before = tape_size();
    out = f();
    return tape_size() - before;
  };
  Tensor out;
  SECTION("a channels-last input: one record, conv2d itself, and a channels-last output") {
    const Tensor x_cl = x.contiguous(CL);
    CHECK(records([&] { return conv.forward(x_cl); }, out) == 1);
    CHECK(strictly_channels_last(out));
    CHECK(allclose(out, conv2d(x, conv.weight, conv.bias, 1, 1), 1e-5, 1e-6));
  }
  SECTION("a row-major input is converted (as conv2d would), the weight is not: channels-last out") {
    const Tensor leaf = x.detach().requires_grad_();
    CHECK(records([&] { return conv.forward(leaf); }, out) == 2);  // contiguous(ChannelsLast) of the input, conv2d
    CHECK(strictly_channels_last(out));
    CHECK(allclose(out, conv2d(x, conv.weight, conv.bias, 1, 1), 1e-5, 1e-6));
    out.sum().backward();
    CHECK(leaf.grad().is_contiguous());
    CHECK(conv.weight.grad().is_contiguous());
  }
  SECTION("a weight that is both formats (one input channel, a 1x1 kernel) leaves the choice to the input") {
    // As before and as libtorch after p.contiguous(ChannelsLast): a 1-channel image and its weight are both
    // formats at once, so the first block of a CNN runs row-major; a 1x1 convolution follows its input.
    CHECK(one_channel.forward(randn({2, 1, 5, 5})).is_contiguous());
    CHECK(pointwise.forward(x).is_contiguous());
    CHECK(strictly_channels_last(pointwise.forward(x.contiguous(CL))));
  }
}

TEST_CASE("gradient sums are added in place only where nothing else can see them") {
  const Tensor x = randn({3, 4}, default_generator(), f64()).requires_grad_();
  mul(x, 2.0).sum().backward();
  const void* first = x.grad().raw_data();
  mul(x, 3.0).sum().backward();
  // Note: nothing kept the first .grad, so the second gradient was added to its buffer.
  CHECK(x.grad().raw_data() == first);
  CHECK(identical(x.grad(), full({3, 4}, 5.0, f64())));
  const Tensor kept = x.grad();
  mul(x, 4.0).sum().backward();
  CHECK(identical(kept, full({3, 4}, 5.0, f64())));  // a .grad the caller holds keeps its values
  CHECK(identical(x.grad(), full({3, 4}, 9.0, f64())));
  // A diamond whose two branches hand back the same gradient tensor (add's backward passes it to both
  // operands): the sum must not be written into a tensor the other branch still holds.
  const Tensor y = randn({2, 3, 4, 5}, default_generator(), f64()).contiguous(CL).detach().requires_grad_();
  const Tensor h = mul(y, 1.0);
  const Tensor z = add(add(h, h), mul(h, h));
  const Tensor w = randn({2, 3, 4, 5}, default_generator(), f64());
  mul(z, w).sum().backward();
  CHECK(strictly_channels_last(y.grad()));
  CHECK(allclose(y.grad(), mul(w, add(mul(y.detach(), 2.0), 2.0)), 1e-14, 1e-14));
  // Under create_graph the sum is recorded instead, so it stays differentiable.
  const Tensor v = randn({3}, default_generator(), f64()).requires_grad_();
  const Tensor u = mul(v, v);
  const auto g = autograd::grad({add(u, mul(u, 2.0)).sum()}, {v}, {}, false, true);
  CHECK(allclose(autograd::grad({g[0].sum()}, {v})[0], full({3}, 6.0, f64())));
}

TEST_CASE("optimizers and gradient clipping step a channels-last parameter as its row-major copy") {
  // Note: PyTorch steps channels-last parameters (libtorch's converted models hold them); the updates are
  // elementwise, so the channels-last run must give the row-major run's parameter and state values.
  const Tensor x = randn({2, 3, 6, 6}, default_generator(), f64());
  const Tensor start = randn({4, 3, 3, 3}, default_generator(), f64());
  using Step = std::function<std::vector<Tensor>(Tensor&)>;  // steps twice, returns the state tensors
  const std::vector<std::pair<const char*, Step>> cases = {
      {"SGD, momentum, nesterov, weight decay",
       [](Tensor& p) {
         optim::SGD sgd({p}, optim::SGDOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true});
         sgd.step();
         sgd.step();
         return std::vector<Tensor>{sgd.state(p).momentum_buffer};
       }},
      {"Adam, amsgrad",
       [](Tensor& p) {
         optim::Adam adam({p}, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
         adam.step();
         adam.step();
         return std::vector<Tensor>{adam.state(p).exp_avg, adam.state(p).exp_avg_sq};
       }},
      {"AdamW",
       [](Tensor& p) {
         optim::AdamW adamw({p}, optim::AdamWOptions{.lr = 0.01});
         adamw.step();
         adamw.step();
         return std::vector<Tensor>{adamw.state(p).exp_avg};
       }},
      {"RMSprop, centered, momentum",
       [](Tensor& p) {
         optim::RMSprop rmsprop({p}, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
         rmsprop.step();
         rmsprop.step();
         return std::vector<Tensor>{rmsprop.state(p).square_avg};
       }},
      {"clip_grad_norm_ then clip_grad_value_",
       [](Tensor& p) {
         optim::clip_grad_norm_({p}, 0.5);
         optim::clip_grad_value_({p}, 0.01);
         p.detach().sub_(p.grad());
         return std::vector<Tensor>{};
       }},
  };
  for (const auto& [name, step] : cases) {
    INFO(name);
    std::vector<Tensor> params, grads;
    std::vector<std::vector<Tensor>> states;
    for (const MemoryFormat format : {MemoryFormat::Contiguous, CL}) {
      Tensor p = start.clone().contiguous(format).detach().requires_grad_();  // a copy: the steps write p
      conv2d(x, p).pow(2.0).sum().backward();
      REQUIRE(p.grad().is_contiguous(format));
      states.push_back(step(p));
      params.push_back(p.detach());
      grads.push_back(p.grad());
    }
    CHECK(strictly_channels_last(params[1]));  // stepped where it lies
    CHECK(allclose(params[0], params[1], 1e-12, 1e-14));
    CHECK(allclose(grads[0], grads[1], 1e-12, 1e-14));
    for (std::size_t i = 0; i < states[0].size(); ++i) {
      CHECK(states[1][i].shape() == start.shape());
      CHECK(strictly_channels_last(states[1][i]));  // the state keeps the parameter's format, as zeros_like(p)
      CHECK(allclose(states[0][i], states[1][i], 1e-12, 1e-14));
    }
  }
}
