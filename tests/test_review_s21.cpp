// Session 21 review of the channels-last, bfloat16 and autocast code. Tests tagged [!mayfail] are open defects in
// files other helpers were changing at the time (each says which file and the proposed fix); the rest are edges
// checked (views with offsets, size-0 dims, subsets of requires_grad, hostile BF16 headers...) and one fixed
// defect (bfloat16 refusals naming the op).
#include <functional>
#include <random>

#include <tapegrad/tapegrad.h>
#include "support/properties.h"

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;
TensorOptions f64o() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor ramp(const Shape& shape, DType dtype = DType::Float32) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
  return from_vector(v, shape, TensorOptions{}.with_dtype(dtype));
}
}  // namespace

TEST_CASE("review: autocast linear/matmul with an empty inner dim give zeros (plus bias)") {
  const Tensor x = zeros({3, 0}), w = zeros({4, 0}), b = ramp({4});
  Tensor ref = linear(x, w, b);
  Tensor got;
  {
    AutocastGuard guard;
    got = linear(x, w, b);
  }
  CHECK(allclose(got, ref));
  Tensor a = zeros({3, 0}), m = zeros({0, 5});
  Tensor ref2 = matmul(a, m);
  Tensor got2;
  {
    AutocastGuard guard;
    got2 = matmul(a, m);
  }
  CHECK(allclose(got2, ref2));
  Tensor a3 = zeros({2, 3, 0}), m3 = zeros({2, 0, 5});
  Tensor got3;
  {
    AutocastGuard guard;
    got3 = matmul(a3, m3);
  }
  CHECK(allclose(got3, matmul(a3, m3)));
}

TEST_CASE("review: conv2d and pools with an empty batch in both formats") {
  const Tensor w = ramp({4, 3, 3, 3});
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
  const Tensor base = ramp({3, 4, 5, 6}).contiguous(kCL);
  const Tensor view = base.narrow(0, 1, 2);  // dense NHWC, storage offset 120
  REQUIRE(view.is_contiguous(kCL));
  const Tensor rm = view.contiguous();
  CHECK(allclose(max_pool2d(view, 2), max_pool2d(rm, 2)));
  CHECK(allclose(max_pool2d(view, 3, 2, 1), max_pool2d(rm, 3, 2, 1)));
  CHECK(allclose(avg_pool2d(view, 2), avg_pool2d(rm, 2)));
  CHECK(allclose(adaptive_avg_pool2d(view, {1, 1}), adaptive_avg_pool2d(rm, {1, 1})));
  const Tensor w = ramp({4, 4, 3, 3});
  CHECK(allclose(conv2d(view, w, Tensor(), 1, 1, 1, 1), conv2d(rm, w, Tensor(), 1, 1, 1, 1), 1e-4, 1e-5));
  const Tensor wg = ramp({4, 2, 3, 3});
  CHECK(allclose(conv2d(view, wg, Tensor(), 1, 1, 2, 2), conv2d(rm, wg, Tensor(), 1, 1, 2, 2), 1e-4, 1e-5));
  // A channel slice: channels-last strides, not dense.
  const Tensor cs = base.narrow(1, 1, 2);
  CHECK(allclose(max_pool2d(cs, 2), max_pool2d(cs.contiguous(), 2)));
  CHECK(allclose(avg_pool2d(cs, 2), avg_pool2d(cs.contiguous(), 2)));
  const Tensor w2 = ramp({3, 2, 2, 2});
  CHECK(allclose(conv2d(cs, w2), conv2d(cs.contiguous(), w2), 1e-4, 1e-5));
  const Tensor mean = zeros({4}), var = ones({4});
  CHECK(allclose(batch_norm_eval(view, mean, var, Tensor(), Tensor(), 1e-5),
                 batch_norm_eval(rm, mean, var, Tensor(), Tensor(), 1e-5)));
  CHECK(allclose(batch_norm_train(view, Tensor(), Tensor(), 1e-5).output,
                 batch_norm_train(rm, Tensor(), Tensor(), 1e-5).output, 1e-4, 1e-5));
}

TEST_CASE("review: in-place write to a channels-last input saved by conv2d is caught at backward") {
  Tensor x = ramp({2, 3, 5, 5}).contiguous(kCL);
  x.requires_grad_(true);
  Tensor h = x.mul(2.0);
  const Tensor w = ramp({4, 3, 3, 3}).requires_grad_(true);
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

namespace {
// Gradients of sum(op(inputs) * weights) for the inputs flagged in `wants`, with or without autocast.
std::vector<Tensor> grads_of(const std::function<Tensor(const std::vector<Tensor>&)>& op,
                             const std::vector<Tensor>& values, const std::vector<bool>& wants, bool autocast) {
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < values.size(); ++i)
    inputs.push_back(values[i].defined() ? values[i].detach().clone().requires_grad_(wants[i]) : Tensor());
  Tensor out;
  {
    AutocastGuard guard(DType::BFloat16, autocast);
    out = op(inputs);
  }
  (out * ramp(out.shape())).sum().backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : inputs) grads.push_back(t.defined() ? t.grad() : Tensor());
  return grads;
}
}  // namespace

TEST_CASE("review: autocast gradients for every subset of inputs requiring grad") {
  using Op = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<std::pair<Op, std::vector<Tensor>>> cases{
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1, 1, 1); },
       {ramp({2, 3, 6, 6}), ramp({4, 3, 3, 3}), ramp({4})}},
      // Note: the layouts are made inside the op (differentiably), since the leaves are row-major clones.
      {[](const std::vector<Tensor>& v) { return conv2d(v[0].contiguous(kCL), v[1], v[2], 2, 1, 2, 1); },
       {ramp({2, 3, 7, 7}), ramp({4, 3, 3, 3}), ramp({4})}},
      {[](const std::vector<Tensor>& v) {  // a channels-last batch slice: dense NHWC at a storage offset
         const Tensor x = cat({zeros_like(v[0]), v[0]}, 0).contiguous(kCL).narrow(0, v[0].size(0), v[0].size(0));
         return conv2d(x, v[1], v[2], 1, 1, 1, 1);
       },
       {ramp({2, 3, 7, 7}), ramp({4, 3, 3, 3}), ramp({4})}},
      {[](const std::vector<Tensor>& v) {  // a channels-last channel slice: not dense
         const Tensor x = cat({v[0], zeros_like(v[0])}, 1).contiguous(kCL).narrow(1, 0, v[0].size(1));
         return conv2d(x, v[1], v[2], 1, 0, 1, 1);
       },
       {ramp({2, 3, 7, 7}), ramp({4, 3, 3, 3}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1].contiguous(kCL), v[2], 1, 1, 1, 1); },
       {ramp({2, 3, 7, 7}), ramp({4, 3, 3, 3}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1, 1, 3); },
       {ramp({2, 3, 7, 7}), ramp({6, 1, 3, 3}), ramp({6})}},
      {[](const std::vector<Tensor>& v) {
         return conv2d(v[0].contiguous(kCL), v[1], v[2], {2, 1}, {0, 2}, {1, 2}, 2);
       },
       {ramp({3, 4, 8, 9}), ramp({6, 2, 2, 3}), ramp({6})}},
      {[](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); }, {ramp({5, 3}), ramp({4, 3}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {ramp({2, 5, 3}), ramp({3, 4}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {ramp({1, 5, 3}), ramp({2, 3, 4}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {ramp({3}), ramp({2, 3, 4}), ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {ramp({2, 5, 3}).transpose(1, 2).contiguous().transpose(1, 2), ramp({4, 3}).t(), ramp({4})}},
  };
  for (std::size_t which = 0; which < cases.size(); ++which)
    for (int mask = 1; mask < 8; ++mask) {
      CAPTURE(which, mask);
      const std::vector<bool> wants{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      const auto ref = grads_of(cases[which].first, cases[which].second, wants, false);
      const auto got = grads_of(cases[which].first, cases[which].second, wants, true);
      for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(got[i].defined() == wants[i]);
        if (wants[i] && got[i].defined()) CHECK(allclose(got[i], ref[i], 3e-2, 3e-2));
      }
    }
}

TEST_CASE("review: autocast leaves float64 products in float64 and refuses a float32/float64 mix") {
  const Tensor x64 = ramp({2, 3, 6, 6}, DType::Float64), w64 = ramp({4, 3, 3, 3}, DType::Float64);
  Tensor y;
  {
    AutocastGuard guard;
    y = conv2d(x64, w64);
    CHECK(y.dtype() == DType::Float64);
    CHECK(matmul(ramp({3, 4}, DType::Float64), ramp({4, 2}, DType::Float64)).dtype() == DType::Float64);
    CHECK_THROWS(conv2d(ramp({2, 3, 6, 6}), w64));
  }
  CHECK(allclose(y, conv2d(x64, w64)));
}

namespace {
// x (values of `shape`) in one of several layouts: row-major, channels-last, a channels-last batch slice (dense,
// storage offset), a channels-last channel slice (not dense), a permuted copy, a broadcast of size-1 dims.
Tensor in_layout(const Tensor& values, int layout) {
  const Shape& s = values.shape();
  switch (layout) {
    case 1:
      return values.clone().contiguous(kCL);
    case 2: {
      Shape big = s;
      big[0] += 1;
      Tensor host = zeros(big, TensorOptions{}.with_dtype(values.dtype())).contiguous(kCL);
      Tensor v = host.narrow(0, 1, s[0]);
      v.copy_(values);
      return v;
    }
    case 3: {
      Shape big = s;
      big[1] += 2;
      Tensor host = zeros(big, TensorOptions{}.with_dtype(values.dtype())).contiguous(kCL);
      Tensor v = host.narrow(1, 1, s[1]);
      v.copy_(values);
      return v;
    }
    case 4:
      return values.clone().permute({3, 1, 0, 2}).contiguous().permute({2, 1, 3, 0});
    default:
      return values.clone();
  }
}
}  // namespace

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

// Defect (open; optim/ belongs to another helper this session). The tape gives a channels-last leaf a channels-last
// .grad (autograd/tape.cpp, PyTorch's layout contract), but SGD, Adam, RMSprop, clip_grad_norm_ and
// clip_grad_value_ read param, grad and state through row-major data<T>(), which throws "data: ... non-contiguous
// view ... Call contiguous() first", naming neither the optimizer nor the parameter. PyTorch steps channels-last
// parameters (libtorch's model converted with .contiguous(channels_last), as bench/compare_torch.cpp does).
// Proposed fix: the updates are elementwise over dense buffers, so create the state with empty_like(p, Preserve) /
// zeros_like (which keep channels-last) and read p, grad (grad.contiguous(p's format)) and state with
// data<T>(format), format = detail::dense_format(p).
TEST_CASE("review: optimizers and clipping on a channels-last parameter", "[!mayfail]") {
  const Tensor x = ramp({2, 3, 6, 6});
  for (int which = 0; which < 5; ++which) {
    CAPTURE(which);
    try {
      std::vector<Tensor> result;
      for (MemoryFormat format : {MemoryFormat::Contiguous, kCL}) {
        Tensor p = ramp({4, 3, 3, 3}).contiguous(format).requires_grad_(true);
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
    Tensor x = ramp({2, 3, 4, 5}).contiguous(kCL).requires_grad_(true);
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
    Tensor y = batch_norm_eval(h, zeros({3}), ones({3}), ramp({3}).requires_grad_(true), Tensor(), 1e-5);
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

// Defect (open; autograd/ and autocast belong to other helpers this session). backward(create_graph=true) through
// an autocast product is refused (documented), but only when the engine reaches that node: the leaves reached
// before it (here s) have already accumulated their gradient, so the user's natural retry without create_graph
// doubles s.grad silently (measured: 7.146 vs 3.573). Proposed fix: the engine's pre-pass that already refuses
// cross-thread graphs before touching anything (check_outputs in autograd/tape.cpp) also asks each reachable
// node whether it supports create_graph (a flag the autocast records set), so the refusal comes first.
TEST_CASE("review: a backward refused mid-way under autocast leaves no partial gradients and can be rerun",
          "[!mayfail]") {
  Tensor x = ramp({5, 3}).requires_grad_(true), w = ramp({4, 3}).requires_grad_(true);
  Tensor s = ramp({5, 4}).requires_grad_(true);
  Tensor out;
  {
    AutocastGuard guard;
    out = linear(x, w);
  }
  Tensor loss = out.mul(s).sum().add(s.pow(2.0).sum());
  CHECK_THROWS(loss.backward(Tensor(), true, true));
  CHECK_FALSE(s.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_NOTHROW(loss.backward());
  REQUIRE(s.grad().defined());
  CHECK(allclose(s.grad(), out.detach().add(s.detach().mul(2.0)), 1e-6, 1e-6));
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

// Defect (open; conv ops belong to another helper this session). docs/autocast.md lists conv_transpose2d as "not
// autocast", but its backward computes the input gradient with the public conv2d, which honours the guard: a
// backward() called inside an AutocastGuard (the usual `with autocast: loss = ...; loss.backward()`) rounds the
// float32 op's gradient operands to bfloat16 (measured |diff| 0.0149 on values ~2.8; torch 1.13 in the same
// setting: 1.5e-6, its convolution_backward is not autocast). Proposed fix: in conv_transpose.cpp's backward
// closure call conv2d under `AutocastGuard off(DType::BFloat16, false)` (or an internal non-autocast conv2d).
TEST_CASE("review: conv_transpose2d's float32 gradient stays float32 when backward runs inside an AutocastGuard",
          "[!mayfail]") {
  const Tensor x = ramp({2, 4, 5, 5}).requires_grad_(true), w = ramp({4, 3, 3, 3});
  const Tensor g = ramp({2, 3, 7, 7});
  const Tensor out = conv_transpose2d(x, w);
  {
    AutocastGuard guard;  // as torch users write `with autocast: loss = ...; loss.backward()`
    out.backward(g);
  }
  const Tensor x64 = x.detach().to(DType::Float64).requires_grad_(true);
  conv_transpose2d(x64, w.to(DType::Float64)).backward(g.to(DType::Float64));
  // float32 arithmetic over 27-term sums: far inside 1e-5; bfloat16 operands are off by ~1e-2
  CHECK(allclose(x.grad().to(DType::Float64), x64.grad(), 1e-5, 1e-5));
}

namespace {
// A safetensors file: the 8-byte little-endian header length, the JSON header, `data_bytes` zero bytes.
std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}
std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("review: hostile safetensors headers for BF16 entries are refused with the entry named") {
  const auto read = [](const std::string& header, std::size_t data) {
    return error_text([&] { read_safetensors(safetensors_bytes(header, data), "hostile.safetensors"); });
  };
  // An odd byte count for a 2-byte dtype.
  CHECK_THAT(read(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,3]}})", 3),
             Catch::Contains("'w'") && Catch::Contains("needs 4"));
  // shape * 2 overflows 64 bits.
  CHECK_THAT(read(R"({"w":{"dtype":"BF16","shape":[9223372036854775807,2],"data_offsets":[0,2]}})", 2),
             Catch::Contains("overflow"));
  // shape * 2 fits but the file does not hold it.
  CHECK_THAT(read(R"({"w":{"dtype":"BF16","shape":[4611686018427387904],"data_offsets":[0,9223372036854775808]}})", 2),
             Catch::Contains("cover"));
  // A well-formed one reads.
  CHECK(read(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 4).empty());
}

TEST_CASE("review: element readers and dtype conversions of channels-last views") {
  for (int layout = 1; layout <= 4; ++layout) {
    CAPTURE(layout);
    const Tensor v = ramp({2, 3, 4, 5}, DType::Float64);
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

TEST_CASE("bfloat16: prod and masked_fill refuse by name; broadcast_to copies the bits", "[bfloat16]") {
  // Before: the dtype dispatch refused with "bfloat16 is not supported by this op", naming no op, and
  // broadcast_to, which only copies elements (as expand().contiguous(), which works), refused too.
  const Tensor x = ramp({2, 3, 4, 5}).to(DType::BFloat16);
  CHECK_THAT(error_text([&] { (void)prod(x); }),
             Catch::StartsWith("prod: bfloat16") && Catch::Contains("[2, 3, 4, 5]"));
  CHECK_THAT(error_text([&] { (void)prod(x, 1); }), Catch::StartsWith("prod: bfloat16"));
  CHECK_THAT(error_text([&] { (void)masked_fill(x, x.to(DType::Float32).gt(0.0), 1.0); }),
             Catch::StartsWith("masked_fill: bfloat16") && Catch::Contains("[2, 3, 4, 5]"));
  const Tensor b = broadcast_to(x.narrow(0, 0, 1), {3, 3, 4, 5});
  CHECK(b.dtype() == DType::BFloat16);
  CHECK(b.to_vector() == x.narrow(0, 0, 1).expand({3, 3, 4, 5}).contiguous().to_vector());
}

// Defect (open; tensor_memory_format.cpp and shape_ops_index.cpp belong to another helper this session): these
// reach detail::dispatch_all, whose bfloat16 refusal names no op. contiguous(ChannelsLast) only moves elements
// and could use dispatch_moves (PyTorch converts bfloat16 to channels-last); index_add and scatter_add compute
// and should refuse by name.
TEST_CASE("bfloat16: contiguous(ChannelsLast), index_add and scatter_add refuse without naming the op",
          "[bfloat16][!mayfail]") {
  const Tensor x = ramp({2, 3, 4, 5}).to(DType::BFloat16);
  CHECK(x.contiguous(kCL).to_vector() == x.to_vector());
  CHECK_THAT(error_text([&] { (void)index_add(x, 0, arange(2), x); }), Catch::StartsWith("index_add"));
  CHECK_THAT(error_text([&] { (void)scatter_add(x, 0, zeros_like(x).to(DType::Int64), x); }),
             Catch::StartsWith("scatter_add"));
}

TEST_CASE("review: unary ops, their in-place forms and gradients on channels-last views") {
  for (int layout = 1; layout <= 4; ++layout) {
    CAPTURE(layout);
    const Tensor v = ramp({2, 3, 4, 5}, DType::Float64);
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
    const Tensor x = ramp({2, 3, 4, 5}).requires_grad_(true);
    const Tensor xv = ramp({2, 3, 4, 5}).requires_grad_(true);
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
  CHECK_THROWS_WITH(bn.forward(ramp({1, 3, 1, 1}).contiguous(kCL)), Catch::Contains("more than 1 value per channel"));
  CHECK_THROWS(bn.forward(ramp({2, 4, 3, 3}).contiguous(kCL)));  // wrong channel count
  const auto after = bn.state();
  for (std::size_t i = 0; i < after.size(); ++i) {
    CAPTURE(after[i].first);
    CHECK(after[i].second.to_vector() == saved[i]);
  }
}

TEST_CASE("review: autocast conv2d keeps the float32 op's output format (torch 1.13: channels-last)") {
  const Tensor x = ramp({2, 3, 6, 6}).contiguous(kCL).requires_grad_(true), w = ramp({4, 3, 3, 3});
  Tensor y;
  {
    AutocastGuard guard;
    y = conv2d(x, w, Tensor(), 1, 1, 1, 1);
  }
  CHECK(y.dtype() == DType::Float32);
  CHECK(y.is_contiguous(kCL));
  y.backward(ramp(y.shape()));
  CHECK(x.grad().is_contiguous(kCL));
}
