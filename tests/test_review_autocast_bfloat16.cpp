// Review of the autocast and bfloat16 code (session 21): autocast with every subset of inputs requiring grad,
// float64 and empty operands, backward inside a guard, a refused create_graph leaving no partial gradients;
// bfloat16 refusals naming the op, element moves, hostile BF16 safetensors headers.
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
}  // namespace

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
  (out * sine_ramp(out.shape())).sum().backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : inputs) grads.push_back(t.defined() ? t.grad() : Tensor());
  return grads;
}
}  // namespace

TEST_CASE("review: autocast linear/matmul with an empty inner dim give zeros (plus bias)") {
  const Tensor x = zeros({3, 0}), w = zeros({4, 0}), b = sine_ramp({4});
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

TEST_CASE("review: autocast gradients for every subset of inputs requiring grad") {
  using Op = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<std::pair<Op, std::vector<Tensor>>> cases{
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1, 1, 1); },
       {sine_ramp({2, 3, 6, 6}), sine_ramp({4, 3, 3, 3}), sine_ramp({4})}},
      // Note: the layouts are made inside the op (differentiably), since the leaves are row-major clones.
      {[](const std::vector<Tensor>& v) { return conv2d(v[0].contiguous(kCL), v[1], v[2], 2, 1, 2, 1); },
       {sine_ramp({2, 3, 7, 7}), sine_ramp({4, 3, 3, 3}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) {  // a channels-last batch slice: dense NHWC at a storage offset
         const Tensor x = cat({zeros_like(v[0]), v[0]}, 0).contiguous(kCL).narrow(0, v[0].size(0), v[0].size(0));
         return conv2d(x, v[1], v[2], 1, 1, 1, 1);
       },
       {sine_ramp({2, 3, 7, 7}), sine_ramp({4, 3, 3, 3}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) {  // a channels-last channel slice: not dense
         const Tensor x = cat({v[0], zeros_like(v[0])}, 1).contiguous(kCL).narrow(1, 0, v[0].size(1));
         return conv2d(x, v[1], v[2], 1, 0, 1, 1);
       },
       {sine_ramp({2, 3, 7, 7}), sine_ramp({4, 3, 3, 3}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1].contiguous(kCL), v[2], 1, 1, 1, 1); },
       {sine_ramp({2, 3, 7, 7}), sine_ramp({4, 3, 3, 3}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1, 1, 3); },
       {sine_ramp({2, 3, 7, 7}), sine_ramp({6, 1, 3, 3}), sine_ramp({6})}},
      {[](const std::vector<Tensor>& v) {
         return conv2d(v[0].contiguous(kCL), v[1], v[2], {2, 1}, {0, 2}, {1, 2}, 2);
       },
       {sine_ramp({3, 4, 8, 9}), sine_ramp({6, 2, 2, 3}), sine_ramp({6})}},
      {[](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); }, {sine_ramp({5, 3}), sine_ramp({4, 3}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {sine_ramp({2, 5, 3}), sine_ramp({3, 4}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {sine_ramp({1, 5, 3}), sine_ramp({2, 3, 4}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {sine_ramp({3}), sine_ramp({2, 3, 4}), sine_ramp({4})}},
      {[](const std::vector<Tensor>& v) { return matmul(v[0], v[1]).add(v[2]); },
       {sine_ramp({2, 5, 3}).transpose(1, 2).contiguous().transpose(1, 2), sine_ramp({4, 3}).t(), sine_ramp({4})}},
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
  const Tensor x64 = sine_ramp({2, 3, 6, 6}, DType::Float64), w64 = sine_ramp({4, 3, 3, 3}, DType::Float64);
  Tensor y;
  {
    AutocastGuard guard;
    y = conv2d(x64, w64);
    CHECK(y.dtype() == DType::Float64);
    CHECK(matmul(sine_ramp({3, 4}, DType::Float64), sine_ramp({4, 2}, DType::Float64)).dtype() == DType::Float64);
    CHECK_THROWS(conv2d(sine_ramp({2, 3, 6, 6}), w64));
  }
  CHECK(allclose(y, conv2d(x64, w64)));
}

// Regression (found in review, fixed in autograd/tape.cpp): backward(create_graph=true) through an autocast
// product is refused, but it used to be refused only when the engine reached that node, after leaves reached
// earlier (here s) had accumulated their gradient, so the natural retry without create_graph doubled s.grad
// (7.146 vs 3.573). Autocast records are now marked first-order only and the refusal comes before any deposit.
TEST_CASE("review: a backward refused mid-way under autocast leaves no partial gradients and can be rerun") {
  Tensor x = sine_ramp({5, 3}).requires_grad_(true), w = sine_ramp({4, 3}).requires_grad_(true);
  Tensor s = sine_ramp({5, 4}).requires_grad_(true);
  Tensor out;
  {
    AutocastGuard guard;
    out = linear(x, w);
  }
  Tensor loss = out.mul(s).sum().add(s.pow(2.0).sum());
  CHECK_THROWS_WITH(loss.backward(Tensor(), true, true),
                    Catch::Contains("linear: backward with create_graph=true through a bfloat16 autocast product"));
  CHECK_FALSE(s.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_NOTHROW(loss.backward());
  REQUIRE(s.grad().defined());
  CHECK(allclose(s.grad(), out.detach().add(s.detach().mul(2.0)), 1e-6, 1e-6));
}

// Regression (found in review, fixed in autograd/tape.cpp): conv_transpose2d is not autocast, but its backward
// computes the input gradient with the public conv2d; a backward() called inside an AutocastGuard rounded that
// float32 op's operands to bfloat16 (|diff| 0.0149 on values ~2.8; torch 1.13: 1.5e-6). The engine now runs every
// backward with autocast off; the autocast records chose their precision at forward time.
TEST_CASE("review: conv_transpose2d's float32 gradient stays float32 when backward runs inside an AutocastGuard") {
  const Tensor x = sine_ramp({2, 4, 5, 5}).requires_grad_(true), w = sine_ramp({4, 3, 3, 3});
  const Tensor g = sine_ramp({2, 3, 7, 7});
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

TEST_CASE("bfloat16: prod and masked_fill refuse by name; broadcast_to copies the bits", "[bfloat16]") {
  // Before: the dtype dispatch refused with "bfloat16 is not supported by this op", naming no op, and
  // broadcast_to, which only copies elements (as expand().contiguous(), which works), refused too.
  const Tensor x = sine_ramp({2, 3, 4, 5}).to(DType::BFloat16);
  CHECK_THAT(error_text([&] { (void)prod(x); }),
             Catch::StartsWith("prod: bfloat16") && Catch::Contains("[2, 3, 4, 5]"));
  CHECK_THAT(error_text([&] { (void)prod(x, 1); }), Catch::StartsWith("prod: bfloat16"));
  CHECK_THAT(error_text([&] { (void)masked_fill(x, x.to(DType::Float32).gt(0.0), 1.0); }),
             Catch::StartsWith("masked_fill: bfloat16") && Catch::Contains("[2, 3, 4, 5]"));
  const Tensor b = broadcast_to(x.narrow(0, 0, 1), {3, 3, 4, 5});
  CHECK(b.dtype() == DType::BFloat16);
  CHECK(b.to_vector() == x.narrow(0, 0, 1).expand({3, 3, 4, 5}).contiguous().to_vector());
}

// Regression (found in review): contiguous(ChannelsLast) only moves elements and now converts bfloat16 (as
// PyTorch's); index_add and scatter_add compute, and refuse bfloat16 by name (the dtype dispatch named no op).
TEST_CASE("bfloat16: contiguous(ChannelsLast) moves bfloat16; index_add and scatter_add refuse it by name",
          "[bfloat16]") {
  const Tensor x = sine_ramp({2, 3, 4, 5}).to(DType::BFloat16);
  CHECK(x.contiguous(kCL).is_contiguous(kCL));
  CHECK(x.contiguous(kCL).to_vector() == x.to_vector());
  CHECK_THAT(error_text([&] { (void)index_add(x, 0, arange(2), x); }), Catch::StartsWith("index_add"));
  CHECK_THAT(error_text([&] { (void)scatter_add(x, 0, zeros_like(x).to(DType::Int64), x); }),
             Catch::StartsWith("scatter_add"));
}

TEST_CASE("review: autocast conv2d keeps the float32 op's output format (torch 1.13: channels-last)") {
  const Tensor x = sine_ramp({2, 3, 6, 6}).contiguous(kCL).requires_grad_(true), w = sine_ramp({4, 3, 3, 3});
  Tensor y;
  {
    AutocastGuard guard;
    y = conv2d(x, w, Tensor(), 1, 1, 1, 1);
  }
  CHECK(y.dtype() == DType::Float32);
  CHECK(y.is_contiguous(kCL));
  y.backward(sine_ramp(y.shape()));
  CHECK(x.grad().is_contiguous(kCL));
}
