// The Transformer layers' fused ops (ops/detail): relu_dropout and add_dropout give dropout's mask, values and
// gradients bit for bit; packed_self_attention gives the values, dropout mask and gradients of three projections'
// heads through scaled_dot_product_attention; each is gradient-checked to the second order in float64.
#include <cmath>
#include <limits>
#include <vector>

#include "support/properties.h"
#include <tapegrad/framework/ops/detail/attention_packed.h>
#include <tapegrad/framework/ops/detail/dropout_fused.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

// Values with zeros, negatives, an infinity and a NaN, where relu and dropout's rules differ from a plain product.
Tensor special_values(DType dtype) {
  std::vector<double> values;
  for (int i = 0; i < 97; ++i) values.push_back(std::sin(i * 1.7) * (i % 5));
  values[3] = std::numeric_limits<double>::infinity();
  values[8] = -std::numeric_limits<double>::infinity();
  values[13] = std::numeric_limits<double>::quiet_NaN();
  values[21] = -0.0;
  return from_vector(values, {97}, TensorOptions{}.with_dtype(dtype));
}

// [L, B, E] with heads -> [B * heads, L, hd], MultiheadAttention's view.
Tensor heads_of(const Tensor& x, std::int64_t heads) {
  const std::int64_t L = x.size(0), B = x.size(1), E = x.size(2);
  return x.reshape({L, B * heads, E / heads}).transpose(0, 1);
}

// What MultiheadAttention composed before the packed op: thirds, heads, attention, heads back to [L, B, E].
Tensor composed_attention(const Tensor& qkv, std::int64_t heads, const Tensor& mask, double p, Generator& generator) {
  const std::int64_t L = qkv.size(0), B = qkv.size(1), E = qkv.size(2) / 3;
  const Tensor q = heads_of(narrow(qkv, 2, 0, E), heads), k = heads_of(narrow(qkv, 2, E, E), heads),
               v = heads_of(narrow(qkv, 2, 2 * E, E), heads);
  const Tensor attended = scaled_dot_product_attention(q, k, v, AttentionMask::additive(mask), p, false, generator);
  return attended.transpose(0, 1).reshape({L, B, E});
}

}  // namespace

TEST_CASE("relu_dropout and add_dropout are dropout's values, mask and gradients, bit for bit") {
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const double p : {0.1, 0.5, 1.0}) {
      const Tensor x = special_values(dtype).requires_grad_(), r = flip(special_values(dtype), {0}).requires_grad_();
      const Tensor g = flip(special_values(dtype), {0});
      Generator a(3), b(3);
      const Tensor fused = detail::relu_dropout(x, p, a), plain = dropout(relu(x), p, true, b);
      CHECK(identical(fused, plain));
      CHECK(a.state() == b.state());
      const auto fused_grad = autograd::grad({fused}, {x}, {g}), plain_grad = autograd::grad({plain}, {x}, {g});
      CHECK(identical(fused_grad[0], plain_grad[0]));
      const Tensor summed = detail::add_dropout(r, x, p, a), plain_sum = add(r, dropout(x, p, true, b));
      CHECK(identical(summed, plain_sum));
      const auto fused_sum = autograd::grad({summed}, {r, x}, {g}), plain_sums = autograd::grad({plain_sum}, {r, x}, {g});
      CHECK(identical(fused_sum[0], plain_sums[0]));
      CHECK(identical(fused_sum[1], plain_sums[1]));
    }
  Generator generator(1);
  CHECK_THROWS_WITH(detail::add_dropout(ones({2}), ones({3}), 0.1, generator),
                    "add_dropout: residual [2] float32 and branch [3] float32 must be float tensors of one shape and dtype");
}

TEST_CASE("relu_dropout and add_dropout gradients are right to the second order") {
  rc::prop("fixed mask per evaluation", [] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 12);
    Generator values(*rc::gen::inRange<std::uint64_t>(0, 1000));
    const Tensor x = randn({n}, values, f64()), r = randn({n}, values, f64());
    const double p = *rc::gen::element(0.2, 0.5);
    const auto relu_f = [p](const std::vector<Tensor>& in) {
      Generator g(9);
      return detail::relu_dropout(mul(in[0], in[0]), p, g);  // squared: second derivatives that are not 0
    };
    const auto add_f = [p](const std::vector<Tensor>& in) {
      Generator g(9);
      return detail::add_dropout(mul(in[0], in[1]), mul(in[1], in[1]), p, g);
    };
    TAPEGRAD_RC_GRADCHECK(relu_f, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(relu_f, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADCHECK(add_f, (std::vector<Tensor>{r, x}));
    TAPEGRAD_RC_GRADGRADCHECK(add_f, (std::vector<Tensor>{r, x}));
  });
}

TEST_CASE("packed_self_attention is the heads' scaled_dot_product_attention, dropout and gradients included") {
  const std::int64_t L = 7, B = 3, heads = 2, E = 8;
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const double p : {0.0, 0.3}) {
      const TensorOptions options = TensorOptions{}.with_dtype(dtype);
      Generator values(5);
      const Tensor qkv = randn({L, B, 3 * E}, values, options).requires_grad_();
      const Tensor causal = nn::generate_square_subsequent_mask(L, dtype).unsqueeze(0);
      const Tensor g = randn({L, B, E}, values, options);
      Generator a(11), b(11);
      const Tensor packed = detail::packed_self_attention(qkv, heads, causal, p, a);
      const Tensor composed = composed_attention(qkv, heads, causal, p, b);
      const double tolerance = dtype == DType::Float64 ? 1e-13 : 1e-5;
      CHECK(allclose(packed, composed, tolerance, tolerance));
      CHECK(a.state() == b.state());
      const auto packed_grad = autograd::grad({packed}, {qkv}, {g}, true);
      CHECK(allclose(packed_grad[0], autograd::grad({composed}, {qkv}, {g})[0], tolerance, tolerance));
      // the same graph twice (the dropout mask replayed from a copy of the generator each time)
      CHECK(identical(packed_grad[0], autograd::grad({packed}, {qkv}, {g})[0]));
    }
}

TEST_CASE("packed_self_attention gradients are right to the second order, with masks and dropout") {
  rc::prop("random sizes", [] {
    const auto L = *rc::gen::inRange<std::int64_t>(1, 4), B = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto heads = *rc::gen::inRange<std::int64_t>(1, 3), hd = *rc::gen::inRange<std::int64_t>(1, 3);
    Generator values(*rc::gen::inRange<std::uint64_t>(0, 1000));
    const Tensor qkv = randn({L, B, 3 * heads * hd}, values, f64());
    const bool causal = *rc::gen::arbitrary<bool>();
    const Tensor mask = causal ? nn::generate_square_subsequent_mask(L, DType::Float64)
                               : randn({B * heads, L, L}, values, f64());
    const double p = *rc::gen::element(0.0, 0.4);
    const auto f = [=](const std::vector<Tensor>& in) {
      Generator g(99);  // the same mask at every evaluation
      return detail::packed_self_attention(in[0], heads, mask, p, g);
    };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{qkv}));
    TAPEGRAD_RC_GRADGRADCHECK(f, (std::vector<Tensor>{qkv}));
  });
}

TEST_CASE("MultiheadAttention's packed self-attention in training equals its general path") {
  for (const double p : {0.0, 0.25}) {
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).with_dropout(p).with_dropout_seed(4).with_dtype(DType::Float64));
    Generator values(2);
    const Tensor x = randn({5, 3, 8}, values, f64()).requires_grad_();
    const Tensor other = x.detach().clone().requires_grad_();
    const Tensor key = mul(other, 1.0);  // key and value not the query's tensor: the general path
    const Tensor mask = nn::generate_square_subsequent_mask(5, DType::Float64);
    const Tensor packed = m.forward_with_weights(x, x, x, {}, false, mask).attn_output;
    m.num_masks_drawn.fill_(0.0);
    const Tensor general = m.forward_with_weights(other, key, key, {}, false, mask).attn_output;
    CHECK(allclose(packed, general, 1e-13, 1e-13));
    const Tensor g = randn(packed.shape(), values, f64());
    const auto w = m.in_proj_weight;
    const auto packed_grads = autograd::grad({packed}, {x, w}, {g}), general_grads = autograd::grad({general}, {other, w}, {g});
    CHECK(allclose(packed_grads[0], general_grads[0], 1e-12, 1e-13));
    CHECK(allclose(packed_grads[1], general_grads[1], 1e-12, 1e-13));
  }
}

TEST_CASE("dropout's mask is the documented draw of the generator's stream, long masks included") {
  // Long masks continue the engine's sequence in bulk (kernels/dropout_mask.cpp): the same numbers, and the
  // generator left where one-at-a-time draws leave it.
  for (const std::int64_t n : {7, 100001}) {
    Generator generator(17), scalar(17);
    generator.engine().discard(3);
    scalar.engine().discard(3);
    const double p = 0.3;
    const std::vector<double> out = dropout(ones({n}, f64()), p, true, generator).to_vector();
    std::uint64_t bits = 0;
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if ((i & 1) == 0) bits = scalar.engine()();
      const auto half = static_cast<double>((i & 1) ? bits >> 32 : bits & 0xffffffffu);
      wrong += out[static_cast<std::size_t>(i)] != (half < p * 4294967296.0 ? 0.0 : 1.0 / (1.0 - p));
    }
    CHECK(wrong == 0);
    CHECK(generator.state() == scalar.state());
  }
}
