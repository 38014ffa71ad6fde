// Channels-last convolution and BatchNorm: the same values and gradients as on row-major tensors, outputs in
// PyTorch 1.13's formats, float64 gradients through the NHWC paths, BatchNorm's buffers in eval, Module::to and
// a small CNN trained three steps in each format.
// Tolerances: float64 runs the same arithmetic in both formats (im2col with the activations transposed; BatchNorm's
// sums in double over a different order), float32 runs oneDNN's NHWC kernels against its blocked ones or im2col,
// so float32 values agree to ~1e-5 relative (summation order), not bit for bit.
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/conv.h>
#include <tapegrad/layers/sequential.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

struct Options {
  IntPair stride = 1, padding = 0, dilation = 1;
  std::int64_t groups = 1;
};

struct Problem {
  Options options;
  Tensor x, w, b;
};

// A random convolution: 1-3 channels per group (so some inputs are both row-major and channels-last, C == 1),
// strides, padding, dilation, groups, with or without bias.
rc::Gen<Problem> problem(DType dtype) {
  return rc::gen::exec([=] {
    Problem p;
    Options& o = p.options;
    o.groups = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto cg = *rc::gen::inRange<std::int64_t>(1, 4);
    const auto og = *rc::gen::inRange<std::int64_t>(1, 4);
    const auto kh = *rc::gen::inRange<std::int64_t>(1, 4), kw = *rc::gen::inRange<std::int64_t>(1, 4);
    o.stride = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    o.padding = {*rc::gen::inRange<std::int64_t>(0, 2), *rc::gen::inRange<std::int64_t>(0, 2)};
    o.dilation = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    const auto min_h = std::max<std::int64_t>(1, o.dilation.h * (kh - 1) + 1 - 2 * o.padding.h);
    const auto min_w = std::max<std::int64_t>(1, o.dilation.w * (kw - 1) + 1 - 2 * o.padding.w);
    const auto h = min_h + *rc::gen::inRange<std::int64_t>(0, 3), w = min_w + *rc::gen::inRange<std::int64_t>(0, 3);
    const auto n = *rc::gen::inRange<std::int64_t>(1, 3);
    p.x = (*gen::tensor_of_shape({n, cg * o.groups, h, w})).to(dtype);
    p.w = (*gen::tensor_of_shape({og * o.groups, cg, kh, kw})).to(dtype);
    if (*rc::gen::arbitrary<bool>()) p.b = (*gen::tensor_of_shape({og * o.groups})).to(dtype);
    return p;
  });
}

Tensor conv(const Problem& p, const Tensor& x, const Tensor& w, const Tensor& b) {
  const Options& o = p.options;
  return conv2d(x, w, b, o.stride, o.padding, o.dilation, o.groups);
}

struct Outputs {
  Tensor y, dx, dw, db;
};

// The output and the gradients of <conv(x, w, b), g> for x and w given in whatever format.
Outputs run(const Problem& p, const Tensor& x_in, const Tensor& w_in, const Tensor& g) {
  const Tensor x = x_in.detach().requires_grad_(true), w = w_in.detach().requires_grad_(true);
  const Tensor b = p.b.defined() ? p.b.detach().requires_grad_(true) : Tensor();
  Outputs out;
  out.y = conv(p, x, w, b);
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  const std::vector<Tensor> grads = autograd::grad({out.y}, inputs, {g});
  out.dx = grads[0];
  out.dw = grads[1];
  if (b.defined()) out.db = grads[2];
  return out;
}

bool suggests_cl(const Tensor& t) { return t.suggest_memory_format() == kCL; }

// PyTorch's format of a convolution's output and input gradient: channels-last when the input or the weight
// suggests it (torch 1.13 checked by hand on every mix of formats, with C == 1 and 1x1 kernels).
void check_formats(const Outputs& o, const Tensor& x, const Tensor& w) {
  if (suggests_cl(x) || suggests_cl(w)) {
    RC_ASSERT(o.y.is_contiguous(kCL));
    RC_ASSERT(o.dx.is_contiguous(kCL));
  } else {
    RC_ASSERT(o.y.is_contiguous());
    RC_ASSERT(o.dx.is_contiguous());
  }
}

void check_same(const Outputs& a, const Outputs& b, DType dtype) {
  if (dtype == DType::Float64) {
    TAPEGRAD_RC_IDENTICAL(a.y, b.y);
    TAPEGRAD_RC_IDENTICAL(a.dx, b.dx);
    TAPEGRAD_RC_IDENTICAL(a.dw, b.dw);
    if (a.db.defined()) TAPEGRAD_RC_IDENTICAL(a.db, b.db);
    return;
  }
  TAPEGRAD_RC_ALLCLOSE(a.y, b.y, 1e-4, 1e-4);
  TAPEGRAD_RC_ALLCLOSE(a.dx, b.dx, 1e-4, 1e-4);
  TAPEGRAD_RC_ALLCLOSE(a.dw, b.dw, 1e-4, 1e-4);
  if (a.db.defined()) TAPEGRAD_RC_ALLCLOSE(a.db, b.db, 1e-4, 1e-4);
}

void conv_formats_agree(DType dtype) {
  const Problem p = *problem(dtype);
  const Tensor y = conv(p, p.x, p.w, p.b);
  const Tensor g = (*gen::tensor_of_shape(y.shape())).to(dtype);
  const Outputs rows = run(p, p.x, p.w, g);
  const Tensor x_cl = p.x.contiguous(kCL), w_cl = p.w.contiguous(kCL);
  // Input, weight, both channels-last, and a channels-last grad_output into a row-major convolution.
  for (const auto& [x, w] : {std::pair{x_cl, p.w}, std::pair{p.x, w_cl}, std::pair{x_cl, w_cl}}) {
    const Outputs cl = run(p, x, w, g);
    check_formats(cl, x, w);
    check_same(rows, cl, dtype);
  }
  check_same(rows, run(p, p.x, p.w, g.contiguous(kCL)), dtype);
}

}  // namespace

TEST_CASE("channels-last conv2d: the same values and gradients as row-major, in PyTorch's formats") {
  // Note: 25 cases: each new float32 geometry JIT-compiles oneDNN primitives in both layouts (~20 ms a case).
  tapegrad::testing::internal::property("float32 (oneDNN NHWC against blocked / im2col)",
                                        std::source_location::current(),
                                        [] { conv_formats_agree(DType::Float32); }, 25);
  rc::prop("float64 (bit-identical)", [] { conv_formats_agree(DType::Float64); });
}

TEST_CASE("channels-last conv2d: PyTorch 1.13's output format on the mixed and size-1 cases") {
  // python3: torch.nn.functional.conv2d(x, w, padding=1) with x, w row-major or
  // .contiguous(memory_format=torch.channels_last); out "CL" = channels-last and not row-major.
  struct Case {
    std::int64_t n, c, k;
    bool x_cl, w_cl, out_cl;
  };
  const Case cases[] = {
      {2, 3, 3, false, false, false}, {2, 3, 3, false, true, true}, {2, 3, 3, true, false, true},
      {2, 3, 3, true, true, true},    {2, 1, 3, true, true, false}, {2, 1, 3, false, true, false},
      {2, 4, 1, true, false, true},   {2, 4, 1, false, true, false}, {1, 4, 3, true, false, true},
      {1, 4, 3, false, true, true},
  };
  for (const Case& c : cases) {
    const Tensor x0 = randn({c.n, c.c, 6, 6}), w0 = randn({8, c.c, c.k, c.k});
    const Tensor x = c.x_cl ? x0.contiguous(kCL) : x0, w = c.w_cl ? w0.contiguous(kCL) : w0;
    const Tensor y = conv2d(x, w, Tensor(), 1, 1);
    INFO("n=" << c.n << " c=" << c.c << " k=" << c.k << " x_cl=" << c.x_cl << " w_cl=" << c.w_cl);
    CHECK((y.is_contiguous(kCL) && !y.is_contiguous()) == c.out_cl);
    CHECK(allclose(y, conv2d(x0, w0, Tensor(), 1, 1), 1e-5, 1e-5).ok);
  }
}

TEST_CASE("channels-last conv2d and conv_transpose2d: float64 gradients with channels-last operands") {
  rc::prop("conv2d gradcheck", [] {
    const Problem p = *problem(DType::Float64);
    const Options o = p.options;
    std::vector<Tensor> inputs{p.x, p.w};
    if (p.b.defined()) inputs.push_back(p.b);
    TAPEGRAD_RC_GRADCHECK(([&o](const std::vector<Tensor>& v) {
                            return conv2d(v[0].contiguous(kCL), v[1], v.size() > 2 ? v[2] : Tensor(), o.stride,
                                          o.padding, o.dilation, o.groups);
                          }),
                          inputs);
  });
  rc::prop("conv_transpose2d: row-major out (PyTorch 1.13's CPU rule), values as row-major, gradcheck", [] {
    const auto c_in = *rc::gen::inRange<std::int64_t>(2, 4), c_out = *rc::gen::inRange<std::int64_t>(2, 4);
    const auto stride = *rc::gen::inRange<std::int64_t>(1, 3);
    const Tensor x = *gen::tensor_of_shape({2, c_in, 3, 3}), w = *gen::tensor_of_shape({c_in, c_out, 3, 3});
    const Tensor y = conv_transpose2d(x.contiguous(kCL), w.contiguous(kCL), Tensor(), stride, 1);
    RC_ASSERT(y.is_contiguous());
    TAPEGRAD_RC_IDENTICAL(y, conv_transpose2d(x, w, Tensor(), stride, 1));
    TAPEGRAD_RC_GRADCHECK(([stride](const std::vector<Tensor>& v) {
                            return conv_transpose2d(v[0].contiguous(kCL), v[1], Tensor(), stride, 1);
                          }),
                          (std::vector<Tensor>{x, w}));
  });
}

namespace {

// [N, C, H, W] with C >= 2 and H * W >= 2, so the channels-last copy is not also row-major.
rc::Gen<Tensor> bn_input(DType dtype) {
  return rc::gen::exec([=] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 4), c = *rc::gen::inRange<std::int64_t>(2, 5);
    const auto h = *rc::gen::inRange<std::int64_t>(1, 4), w = *rc::gen::inRange<std::int64_t>(2, 4);
    return (*gen::tensor_of_shape({n, c, h, w})).to(dtype);
  });
}

// The same with N*H*W >= 64 rows, so the channels-last passes take the row tiles (kernels/batch_norm_row_passes),
// and C up to 40: chunks of 16 and 8 channels and single channels after them.
rc::Gen<Tensor> bn_tile_input(DType dtype) {
  return rc::gen::exec([=] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 3), c = *rc::gen::inRange<std::int64_t>(2, 41);
    const auto h = *rc::gen::inRange<std::int64_t>(8, 12), w = *rc::gen::inRange<std::int64_t>(8, 12);
    return (*gen::tensor_of_shape({n, c, h, w})).to(dtype);
  });
}

std::shared_ptr<nn::Module> bn_relu(std::int64_t channels, bool with_relu) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::BatchNorm2d>(channels));
  if (with_relu) model->push_back(std::make_shared<nn::ReLU>());
  return model;
}

// BatchNorm2d (and a ReLU after it) on x in both formats, train then eval: values, gradients of x and the
// parameters, and the running statistics agree to 1e-12 (float64) or 1e-5 (float32): the sums' order differs.
void bn_formats_agree(const Tensor& x, bool with_relu) {
  const DType dtype = x.dtype();
  // Note: with a ReLU, a normalised value at 0 is ReLU's kink: the formats' means may differ in the last bit (their
  // sums' order differs), one format's value be 0 and masked, the other's a rounding error above it, and the whole
  // channel's gradient move with that one element (shrinking finds such ties on grids of values: seen once in ~50
  // runs, 80 elements of a 12-channel case off by 2.4 at float64). Those cases are discarded.
  if (with_relu)
    RC_PRE(min(abs(batch_norm_train(x.to(DType::Float64), Tensor(), Tensor(), 1e-5).output)).item() > 1e-5);
  const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
  auto rows = bn_relu(x.size(1), with_relu);
  rows->to(dtype);
  auto cl = rows->clone();
  for (const bool training : {true, false}) {
    rows->train(training);
    cl->train(training);
    const Tensor xa = x.detach().requires_grad_(true), xb = x.contiguous(kCL).detach().requires_grad_(true);
    const Tensor ya = rows->forward(xa), yb = cl->forward(xb);
    RC_ASSERT(yb.is_contiguous(kCL));
    TAPEGRAD_RC_ALLCLOSE(ya, yb, tol, tol);
    const Tensor g = (*gen::tensor_of_shape(x.shape())).to(dtype);
    std::vector<Tensor> pa{xa}, pb{xb};
    for (const Tensor& t : rows->parameters()) pa.push_back(t);
    for (const Tensor& t : cl->parameters()) pb.push_back(t);
    const auto ga = autograd::grad({ya}, pa, {g}), gb = autograd::grad({yb}, pb, {g});
    RC_ASSERT(gb[0].is_contiguous(kCL));
    for (std::size_t i = 0; i < ga.size(); ++i) TAPEGRAD_RC_ALLCLOSE(ga[i], gb[i], tol, tol);
    const auto sa = rows->state(), sb = cl->state();
    for (std::size_t i = 0; i < sa.size(); ++i) TAPEGRAD_RC_ALLCLOSE(sa[i].second, sb[i].second, tol, tol);
  }
}

}  // namespace

TEST_CASE("channels-last BatchNorm2d: the same values, gradients and running statistics, channels-last out") {
  rc::prop("train and eval, with and without a ReLU after it", [] {
    const DType dtype = *rc::gen::element(DType::Float32, DType::Float64);
    bn_formats_agree(*bn_input(dtype), *rc::gen::arbitrary<bool>());
  });
  rc::prop("the same on the row tiles: >= 64 rows, 2..40 channels", [] {
    const DType dtype = *rc::gen::element(DType::Float32, DType::Float64);
    bn_formats_agree(*bn_tile_input(dtype), *rc::gen::arbitrary<bool>());
  });
  rc::prop("float64 gradcheck of the train forward through the row tiles, with and without a ReLU", [] {
    // Normal values from a generated seed: a channel's values are never all equal (a zero variance), which
    // shrinking towards equal values would find. A normalised value within 1e-4 of ReLU's kink would make the
    // finite difference straddle it (about 1 case in 100 at 192 values: seed 64231425 with c = 3 has one at
    // 2.9e-7, in both formats): such a case is discarded.
    const auto c = *rc::gen::inRange<std::int64_t>(2, 20);
    manual_seed(*rc::gen::arbitrary<std::uint32_t>());
    const Tensor x = randn({1, c, 8, 8}).to(DType::Float64);
    RC_PRE(min(abs(batch_norm_train(x, Tensor(), Tensor(), 1e-5).output)).item() > 1e-4);
    const Tensor weight = *gen::tensor_of_shape({c}), bias = *gen::tensor_of_shape({c});
    TAPEGRAD_RC_GRADCHECK(([](const std::vector<Tensor>& v) {
                            return batch_norm_train(v[0].contiguous(kCL), v[1], v[2], 1e-5).output;
                          }),
                          (std::vector<Tensor>{x, weight, bias}));
    auto model = bn_relu(c, true);
    model->to(DType::Float64);
    TAPEGRAD_RC_GRADCHECK(([model](const std::vector<Tensor>& v) { return model->forward(v[0].contiguous(kCL)); }),
                          (std::vector<Tensor>{x}));
  });
  rc::prop("float64 gradcheck, train and eval, through the [N*H*W, C] kernels", [] {
    const Tensor x = *bn_input(DType::Float64);
    const auto c = x.size(1);
    const Tensor weight = *gen::tensor_of_shape({c}), bias = *gen::tensor_of_shape({c});
    const Tensor mean = *gen::tensor_of_shape({c}), var = *gen::tensor_of_shape({c}, 0.5, 2.0);
    TAPEGRAD_RC_GRADCHECK(([](const std::vector<Tensor>& v) {
                            return batch_norm_train(v[0].contiguous(kCL), v[1], v[2], 1e-5).output;
                          }),
                          (std::vector<Tensor>{x, weight, bias}));
    TAPEGRAD_RC_GRADCHECK(([mean, var](const std::vector<Tensor>& v) {
                            return batch_norm_eval(v[0].contiguous(kCL), mean, var, v[1], v[2], 1e-5);
                          }),
                          (std::vector<Tensor>{x, weight, bias}));
  });
}

TEST_CASE("channels-last BatchNorm2d on the row tiles with 2 threads: the row-major run's values") {
  // Note: 8*24*16*16 elements, past the passes' threading threshold (32768), so the row ranges split over threads
  // and the per-thread sums merge; 24 channels are a chunk of 16 and one of 8.
  const int threads = get_num_threads();
  set_num_threads(2);
  for (const DType dtype : {DType::Float32, DType::Float64}) {
    for (const bool with_relu : {false, true}) {
      const Tensor x = (randn({8, 24, 16, 16}) * 3.0 + 100.0).to(dtype);
      INFO(dtype_name(dtype) << " relu " << with_relu);
      auto rows = bn_relu(24, with_relu);
      rows->to(dtype);
      auto cl = rows->clone();
      const Tensor xa = x.detach().requires_grad_(true), xb = x.contiguous(kCL).detach().requires_grad_(true);
      const Tensor ya = rows->forward(xa), yb = cl->forward(xb);
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
      CHECK(allclose(ya, yb, tol, tol).ok);
      const Tensor g = randn(x.shape()).to(dtype);
      const Tensor da = autograd::grad({ya}, {xa}, {g})[0], db = autograd::grad({yb}, {xb}, {g})[0];
      CHECK(allclose(da, db, tol, tol).ok);
      const auto sa = rows->state(), sb = cl->state();
      for (std::size_t i = 0; i < sa.size(); ++i) CHECK(allclose(sa[i].second, sb[i].second, tol, tol).ok);
    }
  }
  set_num_threads(threads);
}

TEST_CASE("channels-last BatchNorm2d keeps the buffer rules") {
  // Note: the values are multiples of 1/8 and there are 2^k per channel, so every sum and mean is exact and the
  // statistics do not depend on the summation order. The kit compares a forward on the input with one on
  // input.clone() with requires_grad, and clone() returns a row-major copy at this commit (PyTorch's keeps
  // channels-last), so without exact sums the rule would compare the two formats' roundings, not the rules.
  const auto channels = std::make_shared<std::int64_t>(2);
  tapegrad::testing::check_buffer_invariance(
      [channels] {
        *channels = *rc::gen::inRange<std::int64_t>(2, 4);
        return std::make_shared<nn::BatchNorm2d>(*channels);
      },
      rc::gen::exec([channels] {
        // n * h * w a power of two, so the means (and everything after them) are exact too.
        const auto n = *rc::gen::inRange<std::int64_t>(1, 3), h = *rc::gen::element<std::int64_t>(2, 4);
        const Shape shape{n, *channels, h, 2};
        const auto eighths = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(shape_numel(shape)),
                                                                    rc::gen::inRange(-16, 17));
        std::vector<double> values(eighths.begin(), eighths.end());
        for (double& v : values) v /= 8.0;
        return from_vector(values, shape, TensorOptions{}.with_dtype(DType::Float64)).contiguous(kCL);
      }),
      {.statistics_of =
           tapegrad::testing::statistics_present({"running_mean", "running_var", "num_batches_tracked"})});
}

namespace {

std::shared_ptr<nn::Sequential> small_cnn() {
  return std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Conv2d(nn::Conv2dOptions{3, 8, 3}.with_padding(1)), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions{8, 16, 3}.with_padding(1).with_stride(2)), nn::BatchNorm2d(16), nn::ReLU(),
      nn::Flatten(), nn::Linear(16 * 2 * 2, 5)});
}

}  // namespace

TEST_CASE("Module::to(ChannelsLast): convolutions run channels-last, parameters and state stay row-major") {
  manual_seed(3);
  auto model = small_cnn();
  const nn::NamedTensors before = model->state();
  model->to(kCL);
  CHECK(model->memory_format() == kCL);
  for (const auto& [name, child] : model->named_modules()) CHECK(child->memory_format() == kCL);
  const nn::NamedTensors after = model->state();
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].second.is_contiguous());
    CHECK(identical(before[i].second, after[i].second).ok);
  }
  // A row-major input: the first convolution's weight is handed over channels-last, so its output is too.
  const Tensor x = randn({2, 3, 8, 8});
  auto first = (*model)[0];
  CHECK(first->forward(x).is_contiguous(kCL));
  CHECK(model->clone()->memory_format() == kCL);
  CHECK_THROWS_WITH(model->to(MemoryFormat::Preserve), Catch::Contains("Preserve"));
}

TEST_CASE("a CNN with BatchNorm trained 3 steps channels-last ends with the row-major run's parameters") {
  manual_seed(7);
  auto rows = small_cnn();
  auto cl = std::static_pointer_cast<nn::Sequential>(rows->clone());
  cl->to(kCL);
  optim::SGD sgd_rows(rows->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  optim::SGD sgd_cl(cl->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({4, 3, 8, 8}), labels = randint(0, 5, {4});
    const Tensor x_cl = x.contiguous(kCL);
    for (auto [model, optimizer, input] : {std::tuple{rows, &sgd_rows, x}, std::tuple{cl, &sgd_cl, x_cl}}) {
      optimizer->zero_grad();
      cross_entropy(model->forward(input), labels).backward();
      optimizer->step();
    }
  }
  // float32, three steps of lr 0.1 with momentum: oneDNN's NHWC and blocked sums differ in the last bits.
  const auto a = rows->state(), b = cl->state();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(allclose(a[i].second, b[i].second, 1e-4, 1e-5).ok);
  }
}
