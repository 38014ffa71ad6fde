// Autocast (bfloat16 mixed precision): the guard's semantics; matmul / bmm / linear / conv2d under it compute the
// float32 products of the bfloat16-rounded inputs (values and gradients); the bfloat16 error bound as a property;
// parameters, gradients, optimizer state and BatchNorm's running statistics stay float32; the forced float32
// fallback (what a CPU without AVX-512 runs) agrees with oneDNN's bfloat16 path.
//
// Note: the bounds are elementwise and rigorous, not statistical. Rounding to bfloat16 (8 significant bits, round
// to nearest even) moves a value by at most u = 2^-8 relative, so a product of two rounded factors is off by at
// most (2u + u^2) |a||b|, and a sum of K such products by (2u + u^2) sum|a||b| plus float32's accumulation error
// (at most K 2^-24 sum|a||b|). The reference sums sum|a||b| are the same op run in float64 on |a| and |b| (for a
// gradient: the float64 backward of the same loss on absolute values). Two float32 sums of the same rounded
// products (oneDNN's bfloat16 kernels and the float32 fallback) differ by at most 2 K 2^-24 sum|a||b|.
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <tapegrad/framework/kernels/autocast_path.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/tapegrad.h>

#include "support/error_of.h"
#include "support/properties.h"

using namespace tapegrad;
using tapegrad::testing::error_of;

namespace {

using Inputs = std::vector<Tensor>;
using Op = std::function<Tensor(const Inputs&)>;

// float32 -> bfloat16 (round to nearest even) -> float32.
Tensor rounded(const Tensor& t) {
  const Tensor dense = t.contiguous();
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(dense.numel()));
  kernels::autocast::round_to_bf16(dense.data<float>(), bits.data(), dense.numel());
  Tensor out = empty(dense.shape());
  kernels::autocast::widen_bf16(bits.data(), out.data<float>(), dense.numel());
  return out;
}

Inputs map(const Inputs& inputs, const std::function<Tensor(const Tensor&)>& f) {
  Inputs out;
  for (const Tensor& t : inputs) out.push_back(t.defined() ? f(t) : Tensor());
  return out;
}

// |actual - expected| <= factor * reference elementwise (reference >= 0, float64); "" or the first violation.
std::string within(const Tensor& actual, const Tensor& expected, const Tensor& reference, double factor) {
  if (actual.dtype() != DType::Float32) return "dtype " + std::string(dtype_name(actual.dtype()));
  if (actual.shape() != expected.shape()) return "shapes " + shape_string(actual.shape()) + " vs " + shape_string(expected.shape());
  const Tensor a = actual.to(DType::Float64).contiguous(), e = expected.to(DType::Float64).contiguous(),
               r = reference.contiguous();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::abs(a.data<double>()[i] - e.data<double>()[i]), bound = factor * r.data<double>()[i];
    if (!(diff <= bound + 1e-30))
      return "element " + std::to_string(i) + ": " + std::to_string(a.data<double>()[i]) + " vs " +
             std::to_string(e.data<double>()[i]) + ", |diff| " + std::to_string(diff) + " > bound " +
             std::to_string(bound);
  }
  return "";
}

struct Case {
  const char* name;
  Op op;
  Inputs inputs;
  std::int64_t k;  // the longest sum of products in the forward or the backward
};

// The inputs as autocast multiplies them: rounded, except a bias (a third input), which is added in float32.
Inputs round_all_but_bias(const Case& c) {
  Inputs out = map(c.inputs, rounded);
  if (out.size() == 3) out[2] = c.inputs[2];
  return out;
}

Tensor random(const Shape& shape, Generator& generator) { return randn(shape, generator); }

std::vector<Case> cases() {
  Generator g(42);
  return {
      {"linear", [](const Inputs& v) { return linear(v[0], v[1], v[2]); },
       {random({5, 3, 37}, g), random({11, 37}, g), random({11}, g)}, 37},
      {"linear without bias, 1-d input", [](const Inputs& v) { return linear(v[0], v[1]); },
       {random({19}, g), random({7, 19}, g)}, 19},
      {"matmul", [](const Inputs& v) { return matmul(v[0], v[1]); }, {random({17, 29}, g), random({29, 13}, g)}, 29},
      {"matmul by a transposed view", [](const Inputs& v) { return matmul(v[0], v[1].t()); },
       {random({20, 33}, g), random({12, 33}, g)}, 33},
      {"matmul of a batch by a matrix", [](const Inputs& v) { return matmul(v[0], v[1]); },
       {random({2, 3, 6}, g), random({6, 4}, g)}, 6},
      {"vector times matrix", [](const Inputs& v) { return matmul(v[0], v[1]); }, {random({9}, g), random({9, 4}, g)}, 9},
      {"bmm", [](const Inputs& v) { return bmm(v[0], v[1]); }, {random({3, 7, 9}, g), random({3, 9, 5}, g)}, 9},
      {"broadcast batched matmul", [](const Inputs& v) { return matmul(v[0], v[1]); },
       {random({2, 1, 4, 6}, g), random({3, 6, 5}, g)}, 12},
      {"conv2d", [](const Inputs& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
       {random({2, 5, 9, 8}, g), random({6, 5, 3, 3}, g), random({6}, g)}, 2 * 9 * 8},
      {"conv2d grouped, strided, dilated", [](const Inputs& v) { return conv2d(v[0], v[1], Tensor(), 2, 2, 2, 2); },
       {random({2, 4, 9, 9}, g), random({6, 2, 3, 3}, g)}, 2 * 9 * 9},
      {"conv2d 1 input channel", [](const Inputs& v) { return conv2d(v[0], v[1], v[2]); },
       {random({3, 1, 7, 7}, g), random({4, 1, 3, 3}, g), random({4}, g)}, 3 * 7 * 7},
  };
}

// Output and input gradients of sum(op(inputs) * weights): [output, grad 0, grad 1, ...].
Inputs run(const Op& op, const Inputs& inputs_in, const Tensor& weights, bool autocast) {
  Inputs inputs = map(inputs_in, [](const Tensor& t) { return t.detach().clone().requires_grad_(); });
  Tensor out;
  {
    AutocastGuard guard(DType::BFloat16, autocast);
    out = op(inputs);
  }
  (out * weights).sum().backward();  // after the guard's scope, as PyTorch users write it
  Inputs result{out.detach()};
  for (const Tensor& t : inputs) result.push_back(t.defined() ? t.grad() : Tensor());
  return result;
}

Tensor weights_like(const Op& op, const Inputs& inputs, std::uint64_t seed) {
  Generator g(seed);
  return randn(op(inputs).shape(), g);
}

// The rigorous float64 reference sums for the output and each gradient of sum(op(x) * w): op and backward on
// absolute values.
Inputs references(const Op& op, const Inputs& inputs, const Tensor& weights) {
  Inputs abs_inputs = map(inputs, [](const Tensor& t) { return abs(t).to(DType::Float64).requires_grad_(); });
  Tensor out = op(abs_inputs);
  (out * abs(weights).to(DType::Float64)).sum().backward();
  Inputs result{out.detach()};
  for (const Tensor& t : abs_inputs) result.push_back(t.defined() ? t.grad() : Tensor());
  return result;
}

constexpr double kU = 1.0 / 256;  // bfloat16's unit roundoff: 8 significant bits, 2^-8
double bf16_factor(std::int64_t k) { return 2 * kU + kU * kU + 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24); }
double f32_factor(std::int64_t k) { return 2.0 * static_cast<double>(k + 2) * std::ldexp(1.0, -24); }

}  // namespace

TEST_CASE("AutocastGuard is thread-local, nests, restores, and accepts bfloat16 only") {
  REQUIRE_FALSE(autocast_enabled());
  {
    AutocastGuard outer;
    REQUIRE(autocast_enabled());
    REQUIRE(autocast_dtype() == DType::BFloat16);
    bool other_thread = true;
    std::thread([&] { other_thread = autocast_enabled(); }).join();
    REQUIRE_FALSE(other_thread);
    {
      AutocastGuard off(DType::BFloat16, false);
      REQUIRE_FALSE(autocast_enabled());
      AutocastGuard on;
      REQUIRE(autocast_enabled());
    }
    REQUIRE(autocast_enabled());
  }
  REQUIRE_FALSE(autocast_enabled());
  const std::string error = error_of([] { AutocastGuard guard(DType::Float32); });
  REQUIRE(error.find("AutocastGuard") != std::string::npos);
  REQUIRE(error.find("float32") != std::string::npos);
  REQUIRE_FALSE(autocast_enabled());
}

TEST_CASE("autocast ops return float32: the float32 products of the bfloat16-rounded inputs, values and gradients") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor w = weights_like(c.op, c.inputs, 7);
    const Inputs autocast = run(c.op, c.inputs, w, true);
    const Inputs rounded_inputs = round_all_but_bias(c);
    const Inputs on_rounded = run(c.op, rounded_inputs, rounded(w), false);
    const Inputs plain = run(c.op, c.inputs, w, false);
    const Inputs ref_rounded = references(c.op, rounded_inputs, rounded(w));
    const Inputs ref = references(c.op, c.inputs, w);
    for (std::size_t i = 0; i < autocast.size(); ++i) {
      if (!autocast[i].defined()) continue;
      INFO("output 0, gradients 1..: " << i);
      REQUIRE(autocast[i].dtype() == DType::Float32);
      // Note: a linear bias gradient is the float32 column sum of the unrounded gradient, as without autocast.
      const bool float32_bias_grad = std::string(c.name) == "linear" && i == 3;
      REQUIRE(within(autocast[i], float32_bias_grad ? plain[i] : on_rounded[i], ref_rounded[i], f32_factor(c.k)) == "");
      REQUIRE(within(autocast[i], plain[i], ref[i], bf16_factor(c.k)) == "");
    }
    // The rounding really happened: the output differs from float32's somewhere.
    REQUIRE_FALSE(testing::identical(autocast[0], plain[0]));
  }
}

TEST_CASE("autocast leaves float64 and autocast-off products bit-identical to float32 ops") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor w = weights_like(c.op, c.inputs, 3);
    const Inputs plain = run(c.op, c.inputs, w, false);
    Inputs off;
    {
      AutocastGuard outer;
      off = run(c.op, c.inputs, w, false);  // a nested disabled guard
    }
    for (std::size_t i = 0; i < plain.size(); ++i)
      if (plain[i].defined()) REQUIRE(testing::identical(plain[i], off[i]));
    const Inputs inputs64 = map(c.inputs, [](const Tensor& t) { return t.to(DType::Float64); });
    const Tensor w64 = w.to(DType::Float64);
    const Inputs plain64 = run(c.op, inputs64, w64, false), autocast64 = run(c.op, inputs64, w64, true);
    for (std::size_t i = 0; i < plain64.size(); ++i)
      if (plain64[i].defined()) REQUIRE(testing::identical(plain64[i], autocast64[i]));
  }
}

TEST_CASE("autocast gradients are within bfloat16's bound of float32 gradients (property)") {
  rc::prop("linear and conv2d over random shapes", [] {
    const bool conv = *rc::gen::arbitrary<bool>();
    Generator g(*rc::gen::inRange<std::uint64_t>(0, 1000000));
    Case c{"", {}, {}, 0};
    if (conv) {
      const auto n = *rc::gen::inRange<std::int64_t>(1, 3), ci = *rc::gen::inRange<std::int64_t>(1, 6),
                 co = *rc::gen::inRange<std::int64_t>(1, 6), k = *rc::gen::inRange<std::int64_t>(1, 4),
                 h = *rc::gen::inRange<std::int64_t>(k, 9), stride = *rc::gen::inRange<std::int64_t>(1, 3);
      c = {"conv2d", [stride](const Inputs& v) { return conv2d(v[0], v[1], v[2], stride, 1); },
           {random({n, ci, h, h + 1}, g), random({co, ci, k, k}, g), random({co}, g)}, n * (h + 2) * (h + 3)};
    } else {
      const auto rows = *rc::gen::inRange<std::int64_t>(1, 24), in = *rc::gen::inRange<std::int64_t>(1, 48),
                 out = *rc::gen::inRange<std::int64_t>(1, 24);
      c = {"linear", [](const Inputs& v) { return linear(v[0], v[1], v[2]); },
           {random({rows, in}, g), random({out, in}, g), random({out}, g)}, std::max({rows, in, out})};
    }
    const Tensor w = weights_like(c.op, c.inputs, 11);
    const Inputs autocast = run(c.op, c.inputs, w, true), plain = run(c.op, c.inputs, w, false);
    const Inputs ref = references(c.op, c.inputs, w);
    for (std::size_t i = 0; i < autocast.size(); ++i)
      RC_ASSERT(c.name + std::string(" ") + std::to_string(i) + ": " +
                    within(autocast[i], plain[i], ref[i], bf16_factor(c.k)) ==
                c.name + std::string(" ") + std::to_string(i) + ": ");
  });
}

TEST_CASE("oneDNN's bfloat16 path runs where the CPU has AVX-512, the fallback elsewhere") {
  // Note: under qemu -cpu Haswell or Nehalem (scripts/portability.sh) this proves the fallback is what runs there.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  WARN("oneDNN bfloat16 matmul: " << (kernels::gemm_bf16_native() ? "yes" : "no, the float32 fallback runs"));
  REQUIRE(kernels::gemm_bf16_native() == avx512);
}

TEST_CASE("the float32 fallback agrees with the fast path within float32 reassociation") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const Tensor w = weights_like(c.op, c.inputs, 5);
    const Inputs fast = run(c.op, c.inputs, w, true);
    kernels::autocast::force_fallback(true);
    const Inputs fallback = run(c.op, c.inputs, w, true);
    kernels::autocast::force_fallback(false);
    const Inputs ref = references(c.op, round_all_but_bias(c), rounded(w));
    for (std::size_t i = 0; i < fast.size(); ++i)
      if (fast[i].defined()) REQUIRE(within(fallback[i], fast[i], ref[i], 2 * f32_factor(c.k)) == "");
  }
}

TEST_CASE("under autocast parameters, gradients, optimizer state and BatchNorm statistics stay float32") {
  manual_seed(1);
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{3, 4, 3});
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto fc = std::make_shared<nn::Linear>(4 * 6 * 6, 5);
  auto twin = std::static_pointer_cast<nn::BatchNorm2d>(bn->clone());
  std::vector<Tensor> params = conv->parameters();
  for (const Tensor& p : fc->parameters()) params.push_back(p);
  for (const Tensor& p : bn->parameters()) params.push_back(p);
  optim::SGD sgd(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn({2, 3, 8, 8});
  for (int step = 0; step < 2; ++step) {
    Tensor y, loss;
    {
      AutocastGuard guard;
      y = conv->forward(x);
      REQUIRE(y.dtype() == DType::Float32);
      loss = square(fc->forward(relu(bn->forward(y)).reshape({2, -1}))).mean();
    }
    // BatchNorm's running statistics: exactly those of the same float32 input without autocast.
    twin->forward(y.detach());
    REQUIRE(testing::identical(bn->running_mean, twin->running_mean));
    REQUIRE(testing::identical(bn->running_var, twin->running_var));
    REQUIRE(bn->running_mean.dtype() == DType::Float32);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
    for (const Tensor& p : params) {
      REQUIRE(p.dtype() == DType::Float32);
      REQUIRE(p.grad().dtype() == DType::Float32);
      REQUIRE(sgd.state(p).momentum_buffer.dtype() == DType::Float32);
    }
    twin->weight.detach().copy_(bn->weight.detach());  // keep the twin's affine parameters in step
    twin->bias.detach().copy_(bn->bias.detach());
  }
}

TEST_CASE("backward with create_graph through an autocast product is refused, naming the op") {
  const Tensor x = randn({4, 6}).requires_grad_(), w = randn({3, 6}).requires_grad_();
  Tensor y;
  {
    AutocastGuard guard;
    y = linear(x, w).sum();
  }
  const std::string error = error_of([&] { autograd::grad({y}, {x}, {}, false, true); });
  REQUIRE(error.find("linear") != std::string::npos);
  REQUIRE(error.find("create_graph") != std::string::npos);
}

TEST_CASE("the guard refuses a dtype other than bfloat16, and conv2d refuses create_graph, naming what") {
  const std::string guard_error = error_of([] { AutocastGuard guard(DType::Float64); });
  REQUIRE(guard_error.find("bfloat16 only") != std::string::npos);
  REQUIRE(guard_error.find("float64") != std::string::npos);

  const Tensor x = randn({1, 2, 5, 5}).requires_grad_(), w = randn({3, 2, 3, 3}).requires_grad_();
  Tensor y;
  {
    AutocastGuard guard;
    y = conv2d(x, w).sum();
  }
  const std::string error = error_of([&] { autograd::grad({y}, {x}, {}, false, true); });
  REQUIRE(error.find("conv2d") != std::string::npos);
  REQUIRE(error.find("create_graph") != std::string::npos);
}

TEST_CASE("autocast conv2d on channels-last input: channels-last output and input gradient, the NCHW values") {
  constexpr MemoryFormat kChannelsLast = MemoryFormat::ChannelsLast;
  for (const bool fallback : {false, true}) {
    kernels::autocast::force_fallback(fallback);
    for (const Case& c : cases()) {
      if (std::string(c.name).rfind("conv2d", 0) != 0) continue;
      INFO(c.name << (fallback ? ", float32 fallback" : ", oneDNN where the CPU has it"));
      // The same convolution reading a channels-last copy of its input (gradients flow back to the NCHW leaf).
      const Case channels_last{c.name, [op = c.op](const Inputs& v) {
                                 Inputs cl = v;
                                 cl[0] = v[0].contiguous(kChannelsLast);
                                 return op(cl);
                               },
                               c.inputs, c.k};
      const Tensor w = weights_like(c.op, c.inputs, 13);
      const Inputs nchw = run(c.op, c.inputs, w, true), nhwc = run(channels_last.op, c.inputs, w, true);
      // Note: the same rounded products summed by other kernels (NHWC against blocked): float32 reassociation.
      const Inputs ref = references(c.op, round_all_but_bias(c), rounded(w));
      for (std::size_t i = 0; i < nchw.size(); ++i) {
        INFO("output 0, gradients 1..: " << i);
        if (nchw[i].defined()) REQUIRE(within(nhwc[i], nchw[i], ref[i], 2 * f32_factor(c.k)) == "");
      }
    }
    // The layouts: a channels-last leaf gets a channels-last output and a channels-last gradient.
    Generator g(5);
    const Tensor x = randn({2, 6, 7, 5}, g).contiguous(kChannelsLast).requires_grad_();
    const Tensor w = randn({4, 6, 3, 3}, g).requires_grad_(), b = randn({4}, g).requires_grad_();
    Tensor y;
    {
      AutocastGuard guard;
      y = conv2d(x, w, b, 1, 1);
    }
    REQUIRE(y.dtype() == DType::Float32);
    REQUIRE(y.is_contiguous(kChannelsLast));
    REQUIRE_FALSE(y.is_contiguous());
    (y * randn(y.shape(), g)).sum().backward();
    REQUIRE(x.grad().is_contiguous(kChannelsLast));
    REQUIRE(w.grad().is_contiguous());
    REQUIRE(b.grad().shape() == Shape{4});
  }
  kernels::autocast::force_fallback(false);
}
