// Review of the channels-last code (session 21): views with storage offsets, channel slices and permutations
// through the ops, size-0 batches, in-place writes to saved channels-last tensors, optimizers on channels-last
// parameters; each checked against the row-major result or PyTorch 1.13's rule.
#include <functional>
#include <random>

#include <tapegrad/tapegrad.h>
#include "support/channels_last_cases.h"
#include "support/properties.h"

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::sine_ramp;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;
TensorOptions f64o() { return TensorOptions{}.with_dtype(DType::Float64); }
}  // namespace

namespace {
// A view at offset 1 along `dim` of a channels-last host `extra` bigger there, holding `values`.
Tensor inside_bigger(const Tensor& values, std::int64_t dim, std::int64_t extra) {
  Shape big = values.shape();
  big[static_cast<std::size_t>(dim)] += extra;
  Tensor host = zeros(big, TensorOptions{}.with_dtype(values.dtype())).contiguous(kCL);
  Tensor v = host.narrow(dim, 1, values.size(dim));
  v.copy_(values);
  return v;
}

// x (values of `shape`) in one of several layouts: row-major, channels-last, a channels-last batch slice (dense,
// storage offset), a channels-last channel slice (not dense), a permuted copy, a broadcast of size-1 dims.
Tensor in_layout(const Tensor& values, int layout) {
  switch (layout) {
    case 1:
      return values.clone().contiguous(kCL);
    case 2:
      return inside_bigger(values, 0, 1);
    case 3:
      return inside_bigger(values, 1, 2);
    case 4:
      return values.clone().permute({3, 1, 0, 2}).contiguous().permute({2, 1, 3, 0});
    default:
      return values.clone();
  }
}
}  // namespace

TEST_CASE("review: conv2d and pools with an empty batch in both formats") {
  const Tensor w = sine_ramp({4, 3, 3, 3});
  const Tensor x = zeros({0, 3, 5, 5});
  const Tensor y = conv2d(x, w, Tensor(), 1, 1, 1, 1);
  CHECK(y.shape() == Shape{0, 4, 5, 5});
  const Tensor xc = x.contiguous(kCL);
  const Tensor yc = conv2d(xc, w, Tensor(), 1, 1, 1, 1);
  CHECK(yc.shape() == Shape{0, 4, 5, 5});
  CHECK(max_pool2d(xc, 2).shape() == Shape{0, 3, 2, 2});
  CHECK(avg_pool2d(xc, 2).shape() == Shape{0, 3, 2, 2});
  {
    AutocastGuard guard;
    CHECK(conv2d(x, w, Tensor(), 1, 1, 1, 1).shape() == Shape{0, 4, 5, 5});
  }
}

TEST_CASE("review: channels-last views with a storage offset through pools, conv and batch norm") {
  const Tensor base = sine_ramp({3, 4, 5, 6}).contiguous(kCL);
  const Tensor view = base.narrow(0, 1, 2);  // dense NHWC, storage offset 120
  REQUIRE(view.is_contiguous(kCL));
  const Tensor rm = view.contiguous();
  CHECK(allclose(max_pool2d(view, 2), max_pool2d(rm, 2)));
  CHECK(allclose(max_pool2d(view, 3, 2, 1), max_pool2d(rm, 3, 2, 1)));
  CHECK(allclose(avg_pool2d(view, 2), avg_pool2d(rm, 2)));
  CHECK(allclose(adaptive_avg_pool2d(view, {1, 1}), adaptive_avg_pool2d(rm, {1, 1})));
  const Tensor w = sine_ramp({4, 4, 3, 3});
  CHECK(allclose(conv2d(view, w, Tensor(), 1, 1, 1, 1), conv2d(rm, w, Tensor(), 1, 1, 1, 1), 1e-4, 1e-5));
  const Tensor wg = sine_ramp({4, 2, 3, 3});
  CHECK(allclose(conv2d(view, wg, Tensor(), 1, 1, 2, 2), conv2d(rm, wg, Tensor(), 1, 1, 2, 2), 1e-4, 1e-5));
  // A channel slice: channels-last strides, not dense.
  const Tensor cs = base.narrow(1, 1, 2);
  CHECK(allclose(max_pool2d(cs, 2), max_pool2d(cs.contiguous(), 2)));
  CHECK(allclose(avg_pool2d(cs, 2), avg_pool2d(cs.contiguous(), 2)));
  const Tensor w2 = sine_ramp({3, 2, 2, 2});
  CHECK(allclose(conv2d(cs, w2), conv2d(cs.contiguous(), w2), 1e-4, 1e-5));
  const Tensor mean = zeros({4}), var = ones({4});
  CHECK(allclose(batch_norm_eval(view, mean, var, Tensor(), Tensor(), 1e-5),
                 batch_norm_eval(rm, mean, var, Tensor(), Tensor(), 1e-5)));
  CHECK(allclose(batch_norm_train(view, Tensor(), Tensor(), 1e-5).output,
                 batch_norm_train(rm, Tensor(), Tensor(), 1e-5).output, 1e-4, 1e-5));
}

TEST_CASE("review: in-place write to a channels-last input saved by conv2d is caught at backward") {
  Tensor x = sine_ramp({2, 3, 5, 5}).contiguous(kCL);
  x.requires_grad_(true);
  Tensor h = x.mul(2.0);
  const Tensor w = sine_ramp({4, 3, 3, 3}).requires_grad_(true);
  Tensor y = conv2d(h, w);
  h.mul_(3.0);
  CHECK_THROWS(y.sum().backward());
}

TEST_CASE("review: contiguous(ChannelsLast) of int64 keeps the values") {
  const Tensor i = arange(120).reshape({2, 3, 4, 5});
  const Tensor c = i.contiguous(kCL);
  CHECK(c.is_contiguous(kCL));
  CHECK(c.to_vector() == i.to_vector());
}

TEST_CASE("review: binary ops over channels-last, sliced and broadcast operands match row-major") {
  rc::prop("binary ops", [] {
    const Shape shape{*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4),
                      *rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4)};
    Shape bshape = shape;
    for (auto& e : bshape)
      if (*rc::gen::arbitrary<bool>()) e = 1;
    const auto drop = *rc::gen::inRange<std::size_t>(0, 4);
    bshape.erase(bshape.begin(), bshape.begin() + static_cast<std::ptrdiff_t>(drop));
    const Tensor av = *gen::tensor_of_shape(shape), bv = *gen::tensor_of_shape(bshape);
    const int la = *rc::gen::inRange(0, 5), lb = bshape.size() == 4 ? *rc::gen::inRange(0, 5) : 0;
    const Tensor a = in_layout(av, la), b = in_layout(bv, lb);
    const bool swap = *rc::gen::arbitrary<bool>();
    const Tensor& l = swap ? b : a;
    const Tensor& r = swap ? a : b;
    const Tensor& lv = swap ? bv : av;
    const Tensor& rv = swap ? av : bv;
    RC_ASSERT(allclose(add(l, r), add(lv, rv)));
    RC_ASSERT(allclose(mul(l, r), mul(lv, rv)));
    RC_ASSERT(allclose(sub(l, r), sub(lv, rv)));
    RC_ASSERT(allclose(l.gt(r).to(DType::Float64), lv.gt(rv).to(DType::Float64)));
    RC_ASSERT(allclose(where(l.gt(r), l, r), where(lv.gt(rv), lv, rv)));
    // In place: a (always of the full shape) updated by b.
    Tensor target = in_layout(av, la);
    target.add_(b);
    RC_ASSERT(allclose(target, add(av, bv)));
    target.mul_(b);
    RC_ASSERT(allclose(target, mul(add(av, bv), bv)));
  });
}

TEST_CASE("review: gradients of broadcast binary ops with channels-last operands (float64)") {
  rc::prop("gradcheck", [] {
    const Shape shape{*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 4),
                      *rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    Shape bshape = shape;
    for (auto& e : bshape)
      if (*rc::gen::arbitrary<bool>()) e = 1;
    const Tensor av = *gen::tensor_of_shape(shape), bv = (*gen::tensor_of_shape(bshape)).add(3.0);
    const int la = *rc::gen::inRange(0, 5), lb = *rc::gen::inRange(0, 5);
    const auto f = [la, lb](const std::vector<Tensor>& in) {
      const Tensor a = in[0].contiguous(la == 1 ? kCL : MemoryFormat::Contiguous);
      const Tensor b = in[1].contiguous(lb == 1 ? kCL : MemoryFormat::Contiguous);
      return div(mul(a, add(a, b)), b);
    };
    const std::vector<Tensor> inputs{av, bv};
    TAPEGRAD_RC_GRADCHECK(f, inputs);
    TAPEGRAD_RC_GRADGRADCHECK(f, inputs);
  });
}

// Regression (found in review, fixed in tapegrad/optim): the tape gives a channels-last leaf a channels-last .grad
// (PyTorch's layout contract), but SGD, Adam, RMSprop, clip_grad_norm_ and clip_grad_value_ read parameter,
// gradient and state through row-major data<T>() and threw. They now update the dense buffers in the
// parameter's format, with state kept in that format, as PyTorch steps channels-last parameters.
TEST_CASE("review: optimizers and clipping on a channels-last parameter") {
  const Tensor x = sine_ramp({2, 3, 6, 6});
  for (int which = 0; which < 5; ++which) {
    CAPTURE(which);
    try {
      std::vector<Tensor> result;
      for (MemoryFormat format : {MemoryFormat::Contiguous, kCL}) {
        Tensor p = sine_ramp({4, 3, 3, 3}).contiguous(format).requires_grad_(true);
        conv2d(x, p).pow(2.0).sum().backward();
        REQUIRE(p.grad().is_contiguous(format));
        if (which == 0) {
          optim::SGDOptions o;
          o.lr = 0.01;
          o.momentum = 0.9;
          optim::SGD sgd({p}, o);
          sgd.step();
          sgd.step();
        } else if (which == 1) {
          optim::Adam adam({p});
          adam.step();
        } else if (which == 3) {
          optim::RMSprop rmsprop({p});
          rmsprop.step();
        } else if (which == 4) {
          optim::clip_grad_value_({p}, 0.5);
          p.detach().sub_(p.grad());
        } else {
          optim::clip_grad_norm_({p}, 0.5);
          p.detach().sub_(p.grad());
        }
        result.push_back(p.detach().contiguous());
      }
      CHECK(allclose(result[0], result[1], 1e-5, 1e-6));
    } catch (const std::exception& e) {
      FAIL_CHECK(e.what());
    }
  }
}

TEST_CASE("review: in-place writes to channels-last tensors saved by batch norm and pools are caught") {
  const auto make = [] {
    Tensor x = sine_ramp({2, 3, 4, 5}).contiguous(kCL).requires_grad_(true);
    return x;
  };
  {
    Tensor x = make();
    Tensor h = x.mul(2.0);
    Tensor y = batch_norm_train(h, Tensor(), Tensor(), 1e-5).output;
    h.mul_(3.0);
    CHECK_THROWS(y.pow(2.0).sum().backward());
  }
  {
    Tensor x = make();
    Tensor h = x.mul(2.0);
    Tensor y = batch_norm_eval(h, zeros({3}), ones({3}), sine_ramp({3}).requires_grad_(true), Tensor(), 1e-5);
    h.mul_(3.0);
    CHECK_THROWS(y.pow(2.0).sum().backward());
  }
  {
    Tensor x = make();
    Tensor h = x.mul(2.0);
    Tensor y = max_pool2d(h, 2).pow(2.0);
    h.mul_(3.0);  // max_pool saves only its argmax, so nothing it saved changed
    CHECK_NOTHROW(y.sum().backward());
  }
}

TEST_CASE("review: NHWC pools with dilation, divisor_override and indices match NCHW") {
  rc::prop("pools", [] {
    const Shape shape{*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(2, 5),
                      *rc::gen::inRange<std::int64_t>(5, 9), *rc::gen::inRange<std::int64_t>(5, 9)};
    std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.01 * static_cast<double>(i) - 1.0;
    std::shuffle(values.begin(), values.end(), std::mt19937(*rc::gen::arbitrary<std::uint32_t>()));
    const Tensor v = from_vector(values, shape, f64o());
    const IntPair kernel(*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4));
    const IntPair stride(*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3));
    const IntPair padding(*rc::gen::inRange<std::int64_t>(0, kernel.h / 2 + 1),
                          *rc::gen::inRange<std::int64_t>(0, kernel.w / 2 + 1));
    const IntPair dilation(*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3));
    const bool ceil_mode = *rc::gen::arbitrary<bool>();
    const auto [y, i] = max_pool2d_with_indices(v, kernel, stride, padding, dilation, ceil_mode);
    const auto [yc, ic] = max_pool2d_with_indices(v.contiguous(kCL), kernel, stride, padding, dilation, ceil_mode);
    RC_ASSERT(allclose(y, yc));
    RC_ASSERT(i.to_vector() == ic.to_vector());
    const std::int64_t divisor = *rc::gen::inRange<std::int64_t>(1, 5);
    RC_ASSERT(allclose(avg_pool2d(v, kernel, stride, padding, ceil_mode, true, divisor),
                       avg_pool2d(v.contiguous(kCL), kernel, stride, padding, ceil_mode, true, divisor)));
    const auto f = [=](const std::vector<Tensor>& in) {
      const Tensor x = in[0].contiguous(kCL);
      return max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)
          .pow(2.0)
          .sum()
          .add(avg_pool2d(x, kernel, stride, padding, ceil_mode, false, divisor).pow(2.0).sum());
    };
    const std::vector<Tensor> inputs{v};
    TAPEGRAD_RC_GRADCHECK(f, inputs);
  });
}

TEST_CASE("review: element readers and dtype conversions of channels-last views") {
  for (int layout = 1; layout <= 4; ++layout) {
    CAPTURE(layout);
    const Tensor v = sine_ramp({2, 3, 4, 5}, DType::Float64);
    const Tensor x = in_layout(v, layout);
    CHECK(x.to_vector() == v.to_vector());
    CHECK(x.at({1, 2, 3, 4}) == v.at({1, 2, 3, 4}));
    CHECK(allclose(x.to(DType::Float32).to(DType::Float64), v.to(DType::Float32).to(DType::Float64)));
    CHECK(x.to(DType::BFloat16).to(DType::Float64).to_vector() == v.to(DType::BFloat16).to(DType::Float64).to_vector());
    CHECK(x.to(DType::Int64).to_vector() == v.to(DType::Int64).to_vector());
    CHECK(allclose(x.clone(), v));
    CHECK(allclose(x.sum({1, 3}), v.sum({1, 3})));
    CHECK(allclose(x.mean({0}), v.mean({0})));
    CHECK(x.argmax(1).to_vector() == v.argmax(1).to_vector());
    CHECK(allclose(softmax(x, 1), softmax(v, 1)));
    CHECK(allclose(log_softmax(x, 3), log_softmax(v, 3)));
    CHECK(allclose(layer_norm(x, {5}), layer_norm(v, {5})));
    CHECK(allclose(x.reshape({6, 20}), v.reshape({6, 20})));
    CHECK(allclose(x.permute({0, 2, 3, 1}).reshape({-1, 3}), v.permute({0, 2, 3, 1}).reshape({-1, 3})));
    CHECK(allclose(flip(x, {1, 2}), flip(v, {1, 2})));
    CHECK(allclose(pad(x, {1, 2, 0, 1}), pad(v, {1, 2, 0, 1})));
    CHECK(allclose(cat({x, v}, 1), cat({v, v}, 1)));
  }
}

TEST_CASE("review: unary ops, their in-place forms and gradients on channels-last views") {
  for (int layout = 1; layout <= 4; ++layout) {
    CAPTURE(layout);
    const Tensor v = sine_ramp({2, 3, 4, 5}, DType::Float64);
    const Tensor x = in_layout(v, layout);
    CHECK(allclose(relu(x), relu(v)));
    CHECK(allclose(sigmoid(x), sigmoid(v)));
    CHECK(allclose(exp(x), exp(v)));
    CHECK(allclose(x.mul(2.5).add(1.0), v.mul(2.5).add(1.0)));
    Tensor y = in_layout(v, layout);
    y.relu_();
    CHECK(allclose(y, relu(v)));
    y.clamp_(0.1, 0.5);
    CHECK(allclose(y, clamp(relu(v), 0.1, 0.5)));
    const auto f = [layout](const std::vector<Tensor>& in) {
      const Tensor a =
          layout == 1 ? in[0].contiguous(kCL) : in[0].permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
      return sigmoid(a).mul(a).add(relu(a).pow(2.0));
    };
    const GradcheckResult r = gradcheck(f, {v});
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("review: an in-place op on a view of a channels-last tensor rebases the base's gradient") {
  for (int layout = 1; layout <= 4; ++layout) {
    CAPTURE(layout);
    const Tensor x = sine_ramp({2, 3, 4, 5}).requires_grad_(true);
    const Tensor xv = sine_ramp({2, 3, 4, 5}).requires_grad_(true);
    Tensor h = layout == 1 ? x.mul(1.0).contiguous(kCL) : in_layout(x.detach(), layout).mul(0.0).add(x);
    Tensor hv = xv.mul(1.0);
    h.narrow(1, 0, 2).mul_(h.narrow(1, 1, 2).detach().clone());
    hv.narrow(1, 0, 2).mul_(hv.narrow(1, 1, 2).detach().clone());
    h.narrow(3, 1, 3).relu_();
    hv.narrow(3, 1, 3).relu_();
    CHECK(allclose(h, hv));
    h.pow(2.0).sum().backward();
    hv.pow(2.0).sum().backward();
    CHECK(allclose(x.grad(), xv.grad(), 1e-6, 1e-6));
  }
}

TEST_CASE("review: a refused BatchNorm2d training step leaves the running statistics untouched") {
  nn::BatchNorm2d bn(3);
  const auto before = bn.state();
  std::vector<std::vector<double>> saved;
  for (const auto& [name, t] : before) saved.push_back(t.to_vector());
  CHECK_THROWS_WITH(bn.forward(sine_ramp({1, 3, 1, 1}).contiguous(kCL)), Catch::Contains("more than 1 value per channel"));
  CHECK_THROWS(bn.forward(sine_ramp({2, 4, 3, 3}).contiguous(kCL)));  // wrong channel count
  const auto after = bn.state();
  for (std::size_t i = 0; i < after.size(); ++i) {
    CAPTURE(after[i].first);
    CHECK(after[i].second.to_vector() == saved[i]);
  }
}
