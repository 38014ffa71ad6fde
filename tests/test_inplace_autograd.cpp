// In-place ops recorded by autograd (issue 39, item 2): each in-place op's gradient (and second derivative) is
// gradchecked in float64 written directly into a non-leaf and through views of one (narrow, select, transpose),
// reading the base, the written view or another view afterwards; what libtorch refuses is refused with its
// message; a value overwritten after a backward saved it makes backward throw; and a ResNet block written with
// `out += residual; relu_(out)` trains to the same weights as the out-of-place block.
#include <functional>

#include <tapegrad/tapegrad.h>
#include "support/properties.h"

using namespace tapegrad;
using namespace tapegrad::indexing;
using tapegrad::testing::allclose;

namespace {

using V = const std::vector<Tensor>&;
TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
TensorOptions f64_grad() { return f64().with_requires_grad(); }
std::vector<Tensor> as_list(std::initializer_list<Tensor> tensors) { return tensors; }

// A shape `other` can take to broadcast to `shape`: leading dims dropped, some extents turned into 1.
Shape broadcast_operand_shape(const Shape& shape) {
  const auto drop = *rc::gen::inRange<std::size_t>(0, shape.size() + 1);
  Shape other(shape.begin() + static_cast<std::ptrdiff_t>(drop), shape.end());
  for (auto& extent : other)
    if (*rc::gen::arbitrary<bool>()) extent = 1;
  return other;
}

// Each in-place op under test, applied to `target` with `operand` (ignored by the unary ones). Values are kept
// away from the ops' kinks by the generators below (relu_ and leaky_relu_ at 0, clamp_ at its bounds, div_ by 0).
const char* const kOps[] = {"add_",      "add_ alpha",       "sub_",           "mul_",      "div_",
                            "+= tensor", "-= tensor",        "*= tensor",      "/= tensor", "+= scalar",
                            "-= scalar", "*= scalar",        "/= scalar",      "relu_",     "leaky_relu_",
                            "clamp_",    "clamp_min_",       "masked_fill_",   "copy_",     "zero_",
                            "fill_",     "index_put_ slice", "index_put_ ints"};
constexpr int kOpCount = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));

void apply(int op, Tensor target, const Tensor& operand, const Tensor& mask) {
  switch (op) {
    case 0:
      target.add_(operand);
      break;
    case 1:
      target.add_(operand, -0.5);
      break;
    case 2:
      target.sub_(operand, 2.0);
      break;
    case 3:
      target.mul_(operand);
      break;
    case 4:
      target.div_(operand);
      break;
    case 5:
      target += operand;
      break;
    case 6:
      target -= operand;
      break;
    case 7:
      target *= operand;
      break;
    case 8:
      target /= operand;
      break;
    case 9:
      target += 1.5;
      break;
    case 10:
      target -= 0.25;
      break;
    case 11:
      target *= -3.0;
      break;
    case 12:
      target /= 4.0;
      break;
    case 13:
      relu_(target);
      break;
    case 14:
      leaky_relu_(target, 0.2);
      break;
    case 15:
      target.clamp_(-0.5, 0.5);
      break;
    case 16:
      target.clamp_min_(0.25);
      break;
    case 17:
      target.masked_fill_(mask, 7.0);
      break;
    case 18:
      target.copy_(operand);
      break;
    case 19:
      target.zero_();
      break;
    case 20:
      target.fill_(-2.0);
      break;
    case 21:
      target.index_put_({Slice(0, None, 2)}, operand.dim() == 0 ? operand : operand.index({Slice(0, 1)}));
      break;
    default:  // advanced: rows 0 and the last of dim 0
      target.index_put_({from_vector(std::vector<std::int64_t>{0, target.size(0) - 1}, {2})}, sum(operand));
      break;
  }
}

// Values away from relu's kink at 0, clamp's bounds (-0.5, 0.5, 0.25) and, for a divisor, from 0.
rc::Gen<Tensor> values_of_shape(const Shape& shape) {
  return gen::tensor_of_shape(shape, -2.0, 2.0, {0.0, -0.5, 0.5, 0.25});
}
Tensor operand_for(int op, const Shape& shape) {
  if (op == 4 || op == 8) return *gen::tensor_of_shape(shape, 0.5, 2.0);
  return *values_of_shape(shape);
}

// How the written tensor is reached from the non-leaf `y`: directly, or through a view of it.
enum class Through { Direct, Narrow, Select, Transpose };

Tensor view_of(const Tensor& y, Through through) {
  switch (through) {
    case Through::Direct:
      return y;
    case Through::Narrow:
      return y.narrow(0, 1, y.size(0) - 1);
    case Through::Select:
      return y.select(0, 1);
    default:
      return y.transpose(0, 1);
  }
}

// ---- gradients of every op, directly and through views ----

TEST_CASE("every in-place op on a non-leaf has the right gradient and second derivative (float64)") {
  rc::prop("random op, shape and broadcast operand", [] {
    const int op = *rc::gen::inRange(0, kOpCount);
    RC_TAG(kOps[op]);
    const Shape shape = *gen::shape(1, 3, 2, 3);
    const Tensor x = *values_of_shape(shape);
    const Tensor other = operand_for(op, broadcast_operand_shape(shape));
    const Tensor mask = gt(*gen::tensor_of_shape(broadcast_operand_shape(shape), 0.0, 1.0), 0.5);
    const auto f = [=](V v) {
      Tensor y = v[0] * 1.0;  // a non-leaf
      apply(op, y, v[1], mask);
      return y * y;
    };
    TAPEGRAD_RC_GRADCHECK(f, as_list({x, other}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x, other}));
  });
}

TEST_CASE("an in-place op through a view of a non-leaf sends the gradient to the base (CopySlices)") {
  rc::prop("random op, view, and which tensor is read afterwards", [] {
    const int op = *rc::gen::inRange(0, kOpCount);
    const auto through = static_cast<Through>(*rc::gen::inRange(1, 4));
    const int read = *rc::gen::inRange(0, 3);  // 0 the base, 1 the written view, 2 a view taken before the write
    RC_TAG(kOps[op], static_cast<int>(through), read);
    const Shape shape = *gen::shape(2, 3, 2, 3);
    const Tensor x = *values_of_shape(shape);
    Shape view_shape = view_of(zeros(shape), through).shape();
    const Tensor other = operand_for(op, broadcast_operand_shape(view_shape));
    const Tensor mask = gt(*gen::tensor_of_shape(view_shape, 0.0, 1.0), 0.5);
    const auto f = [=](V v) {
      Tensor y = v[0] * 1.0;
      Tensor earlier = y.narrow(0, 0, 2);  // overlaps every view above
      Tensor target = view_of(y, through);
      apply(op, target, v[1], mask);
      Tensor out = read == 0 ? y : read == 1 ? target : earlier;
      return out * out;
    };
    TAPEGRAD_RC_GRADCHECK(f, as_list({x, other}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x, other}));
  });
}

TEST_CASE("a tensor that does not require grad, written with one that does, then requires grad") {
  rc::prop("copy_ and add_ into a fresh tensor and into a view of one", [] {
    const Tensor w = *gen::tensor_of_shape({3});
    const bool through_view = *rc::gen::arbitrary<bool>();
    const auto f = [=](V v) {
      Tensor t = ones({2, 3}, f64());
      Tensor target = through_view ? t.select(0, 1) : t;
      target.copy_(v[0] * v[0]);
      t.add_(v[0]);
      return t;
    };
    TAPEGRAD_RC_GRADCHECK(f, as_list({w}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({w}));
  });
  Tensor w = tensor({1, 2, 3}, {3}, f64_grad());
  Tensor t = zeros({3}, f64());
  t.add_(w);
  CHECK(t.requires_grad());
  CHECK_FALSE(t.is_leaf());
  CHECK(t.grad_fn_name() == "add_");
  Tensor base = zeros({2, 3}, f64());
  Tensor row = base.select(0, 0);
  Tensor other_row = base.select(0, 1);
  row.copy_(w);
  CHECK(base.grad_fn_name() == "copy_slices");
  CHECK(row.grad_fn_name() == "as_strided");
  CHECK(other_row.requires_grad());  // re-derived from the base's new history when read
  sum(base * 2.0).backward();
  CHECK(w.grad().to_vector() == std::vector<double>{2, 2, 2});
}

TEST_CASE("views taken before an in-place op on the base see the new history") {
  Tensor x = tensor({1, 2, 3, 4}, {2, 2}, f64_grad());
  Tensor y = x * 1.0;
  Tensor column = y.t().select(0, 1);  // y[:, 1]
  y.mul_(3.0);
  sum(column).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 3, 0, 3});
  CHECK(column.to_vector() == std::vector<double>{6, 12});
}

TEST_CASE("several in-place ops through overlapping views give PyTorch's gradients") {
  // PyTorch 1.13: y = x * 2; col = y.t()[1]; row = y[1]; col.mul_(c); row.clamp_(-5, 9); y[0, 2] = 0.5;
  // loss = (y * y).sum() + (col * [1, 2]).sum() + row.sum() -> 332.25, x.grad [8, 150, 0, 34, 0, 0], c.grad [100, 0].
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64_grad());
  Tensor c = tensor({3, -1}, {2}, f64_grad());
  Tensor y = x * 2.0;
  Tensor col = y.t().select(0, 1);
  Tensor row = y.select(0, 1);
  col.mul_(c);
  row.clamp_(-5.0, 9.0);
  y.index_put_({0, 2}, 0.5);
  Tensor loss = sum(y * y) + sum(col * tensor({1, 2}, {2}, f64())) + sum(row);
  CHECK(loss.item() == 332.25);
  loss.backward();
  CHECK(x.grad().to_vector() == std::vector<double>{8, 150, 0, 34, 0, 0});
  CHECK(c.grad().to_vector() == std::vector<double>{100, 0});
}

// ---- what libtorch refuses ----

TEST_CASE("in-place ops refused as libtorch refuses them, with its messages") {
  Tensor w = ones({2, 3}, f64_grad());
  CHECK_THROWS_WITH(w.add_(1.0),
                    Catch::Contains("add_: tensor of shape [2, 3] requires grad and is a leaf: a leaf "
                                    "Variable that requires grad is being used in an in-place operation."));
  CHECK_THROWS_WITH(w += w,
                    Catch::Contains("a leaf Variable that requires grad is being used in an in-place operation."));
  CHECK_THROWS_WITH(relu_(w), Catch::Contains("relu_: tensor of shape [2, 3] requires grad and is a leaf"));
  CHECK_THROWS_WITH(w.t().zero_(), Catch::Contains("zero_: tensor of shape [3, 2] is a view of a leaf of shape [2, 3] "
                                                   "that requires grad: a view of a leaf Variable that requires grad "
                                                   "is being used in an in-place operation."));
  CHECK_THROWS_WITH(w.index_put_({0}, 2.0), Catch::Contains("index_put_: tensor of shape [2, 3] requires grad and is "
                                                            "a leaf"));
  CHECK_THROWS_WITH(w.narrow(1, 0, 1).narrow(0, 1, 1).mul_(ones({1}, f64())),
                    Catch::Contains("a view of a leaf Variable that requires grad"));
  Tensor y = w * 2.0;
  Tensor no_grad_view;
  {
    NoGradGuard no_grad;
    no_grad_view = y.narrow(1, 0, 2);
  }
  CHECK_THROWS_WITH(no_grad_view.fill_(0.0),
                    Catch::Contains("fill_: tensor of shape [2, 2] is a view of a tensor of shape [2, 3] that requires "
                                    "grad, taken under NoGradGuard: a view created in no_grad mode cannot be modified "
                                    "in place with grad mode enabled"));
  // Beyond PyTorch's list, tapegrad's own rules hold: an inference tensor or a module buffer cannot enter autograd.
  Tensor frozen;
  {
    InferenceMode inference;
    frozen = zeros({3}, f64());
  }
  frozen.add_(1.0);  // nothing requires grad: allowed, unrecorded
  CHECK_THROWS_WITH(frozen.add_(tensor({1, 2, 3}, {3}, f64_grad())),
                    Catch::Contains("add_: an inference tensor (shape [3], created under InferenceMode) cannot be "
                                    "modified in place by an op that autograd records"));
  Tensor buffer = zeros({3}, f64());
  buffer.mark_as_buffer();
  CHECK_THROWS_WITH(buffer.copy_(tensor({1, 2, 3}, {3}, f64_grad())), Catch::Contains("copy_: tensor of shape [3] is a "
                                                                                      "module buffer"));
  // Nothing was written by a refused op.
  CHECK(w.to_vector() == std::vector<double>(6, 1.0));
  CHECK(y.to_vector() == std::vector<double>(6, 2.0));
}

TEST_CASE("under NoGradGuard anything may be written and nothing is recorded") {
  Tensor w = ones({2, 2}, f64_grad());
  Tensor y = w * 2.0;
  const std::size_t before = tape_size();
  {
    NoGradGuard no_grad;
    w.add_(1.0);
    w.t().mul_(2.0);
    y += w;
    relu_(y);
    y.narrow(0, 0, 1).zero_();
  }
  CHECK(tape_size() == before);
  CHECK(w.is_leaf());
  CHECK(y.grad_fn_name() == "mul");
  CHECK(w.to_vector() == std::vector<double>(4, 4.0));
  CHECK(y.to_vector() == std::vector<double>{0, 0, 6, 6});
}

TEST_CASE("an in-place op that overwrites a value a recorded backward needs makes backward throw") {
  Tensor x = tensor({-1, 0.5, 2}, {3}, f64_grad());
  Tensor y = sigmoid(x);  // sigmoid's backward reads its output
  y.mul_(2.0);
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("backward of sigmoid: a tensor it saved (shape [3]) was "
                                                       "modified in place after it was used (version 0 -> 1)"));
  // relu_ saves its result: writing into it again before backward is caught too.
  Tensor z = x * 1.0;
  relu_(z);
  z.add_(1.0);  // add_ needs nothing saved, but relu_'s saved result is now stale
  CHECK_THROWS_WITH(sum(z).backward(), Catch::Contains("backward of relu_"));
  // x.mul_(x): the operand is the target itself, overwritten before its own backward reads it (as PyTorch).
  Tensor u = x * 1.0;
  u.mul_(u);
  CHECK_THROWS_WITH(sum(u).backward(), Catch::Contains("backward of mul_"));
  // Through a view: writing a view of a tensor that exp saved.
  Tensor e = exp(x);
  e.narrow(0, 0, 1).zero_();
  CHECK_THROWS_WITH(sum(e).backward(), Catch::Contains("backward of exp"));
  // And what needs nothing saved backpropagates: d(2 * x + 1)/dx through add_ and mul_ on a clone.
  Tensor c = x.clone();
  c.mul_(2.0).add_(1.0);
  sum(c).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{2, 2, 2});
}

// ---- a ResNet block: out += residual; relu_(out) trains as the out-of-place block does ----

struct Block {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;

  Block(bool inplace, Generator& generator) {
    auto conv = [&] {
      return std::make_shared<nn::Conv2d>(nn::Conv2dOptions{3, 3, 3}
                                              .with_padding(1)
                                              .with_bias(false)
                                              .with_dtype(DType::Float64)
                                              .with_generator(generator));
    };
    conv1 = conv();
    conv2 = conv();
    bn1 = std::make_shared<nn::BatchNorm2d>(3);
    bn2 = std::make_shared<nn::BatchNorm2d>(3);
    bn1->to(DType::Float64);
    bn2->to(DType::Float64);
    relu = std::make_shared<nn::ReLU>(nn::ReLUOptions().inplace(inplace));
  }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> all;
    for (const auto* m : {static_cast<const nn::Module*>(conv1.get()), static_cast<const nn::Module*>(bn1.get()),
                          static_cast<const nn::Module*>(conv2.get()), static_cast<const nn::Module*>(bn2.get())})
      for (const Tensor& p : m->parameters()) all.push_back(p);
    return all;
  }
  Tensor forward(const Tensor& x, bool inplace) {
    Tensor out = relu->forward(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    if (inplace) {
      out += x;  // the residual
      out = relu_(out);
      return out;
    }
    return tapegrad::relu(out + x);
  }
};

TEST_CASE("a ResNet block with out += residual and relu_ trains to the same weights as the out-of-place block") {
  Generator init_a(7), init_b(7), data(11);
  Block in_place(true, init_a), out_of_place(false, init_b);
  auto params_a = in_place.parameters(), params_b = out_of_place.parameters();
  REQUIRE(params_a.size() == 6);
  optim::SGD sgd_a(params_a, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  optim::SGD sgd_b(params_b, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    const Tensor x = randn({4, 3, 5, 5}, data, f64());
    const Tensor target = randn({4, 3, 5, 5}, data, f64());
    Tensor loss_a = mean(square(in_place.forward(x, true) - target));
    Tensor loss_b = mean(square(out_of_place.forward(x, false) - target));
    CHECK(loss_a.item() == loss_b.item());
    sgd_a.zero_grad();
    sgd_b.zero_grad();
    loss_a.backward();
    loss_b.backward();
    sgd_a.step();
    sgd_b.step();
  }
  for (std::size_t i = 0; i < params_a.size(); ++i) {
    INFO("parameter " << i);
    CHECK(params_a[i].to_vector() == params_b[i].to_vector());  // bit for bit
  }
  CHECK(in_place.relu->extra_repr() == "inplace=true");
}

TEST_CASE("nn::ReLU and nn::LeakyReLU with inplace write into their input and backpropagate") {
  Tensor x = tensor({-1, 2, -3, 4}, {4}, f64_grad());
  Tensor h = x * 1.0;
  nn::ReLU relu(true);
  Tensor out = relu.forward(h);
  CHECK(out.is_same(h));
  CHECK(h.to_vector() == std::vector<double>{0, 2, 0, 4});
  sum(out).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 1});
  nn::LeakyReLU leaky(nn::LeakyReLUOptions().negative_slope(0.5).inplace(true));
  Tensor g = x * 1.0;
  x.set_grad(Tensor());
  sum(leaky.forward(g)).backward();
  CHECK(g.to_vector() == std::vector<double>{-0.5, 2, -1.5, 4});
  CHECK(x.grad().to_vector() == std::vector<double>{0.5, 1, 0.5, 1});
  CHECK_THROWS_WITH(relu.forward(x), Catch::Contains("a leaf Variable that requires grad"));
}

}  // namespace
