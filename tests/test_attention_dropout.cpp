// scaled_dot_product_attention's dropout on the attention weights: p = 0 is the identity, the mask is
// dropout()'s on the [..., L, S] weights from the same generator, seeded runs repeat, kept weights are
// scaled by 1 / (1 - p), and backward (first and second order, retained graphs) replays the same mask.
#include <cmath>
#include <vector>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(std::uint64_t seed, Shape batch, std::int64_t L, std::int64_t S, std::int64_t E,
                     std::int64_t Ev) {
  Generator generator(seed);
  const auto shape = [&](std::int64_t rows, std::int64_t cols) {
    Shape s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  return {randn(shape(L, E), generator, f64()), randn(shape(S, E), generator, f64()),
          randn(shape(S, Ev), generator, f64())};
}

// The attention weights themselves: with v the S x S identity the output row i is row i of the weights.
Tensor eye(std::int64_t n) {
  std::vector<double> values(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i * n + i)] = 1.0;
  return from_vector(values, {n, n}, f64());
}

}  // namespace

TEST_CASE("dropout_p = 0 (eval) is the plain attention and draws nothing") {
  const Inputs x = random_inputs(1, {2}, 3, 4, 5, 2);
  Generator generator(42), untouched(42);
  CHECK(identical(scaled_dot_product_attention(x.q, x.k, x.v, {}, 0.0, false, generator),
                  scaled_dot_product_attention(x.q, x.k, x.v)));
  CHECK(generator.state() == untouched.state());
}

TEST_CASE("training dropout is dropout() of the softmax weights with the same generator") {
  const Inputs x = random_inputs(2, {2, 3}, 4, 5, 3, 2);
  for (const double p : {0.1, 0.5, 0.9}) {
    Generator a(7), b(7);
    const Tensor fused = scaled_dot_product_attention(x.q, x.k, x.v, {}, p, true, a);
    Tensor scores = mul(matmul(x.q, transpose(x.k, -1, -2)), 1.0 / std::sqrt(3.0));
    Tensor causal = from_vector(std::vector<double>{0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1},
                                {4, 5}, f64());
    scores = masked_fill(scores, causal, -INFINITY);
    const Tensor composed = matmul(dropout(softmax(scores, -1), p, true, b), x.v);
    CHECK(allclose(fused, composed, 1e-12, 1e-13));
    CHECK(a.state() == b.state());  // the same number of draws
  }
}

TEST_CASE("seeded dropout repeats, another seed or the next call draws another mask") {
  const Inputs x = random_inputs(3, {2}, 6, 7, 4, 3);
  Generator a(11), b(11);
  const Tensor first = scaled_dot_product_attention(x.q, x.k, x.v, {}, 0.5, false, a);
  CHECK(identical(first, scaled_dot_product_attention(x.q, x.k, x.v, {}, 0.5, false, b)));
  CHECK_FALSE(identical(first, scaled_dot_product_attention(x.q, x.k, x.v, {}, 0.5, false, a)));
  Generator c(12);
  CHECK_FALSE(identical(first, scaled_dot_product_attention(x.q, x.k, x.v, {}, 0.5, false, c)));
}

TEST_CASE("each weight is dropped with probability p and the kept ones are scaled by 1 / (1 - p)") {
  const std::int64_t L = 64, S = 48;
  const Inputs x = random_inputs(4, {4}, L, S, 8, 1);
  const Tensor weights = scaled_dot_product_attention(x.q, x.k, eye(S));
  for (const double p : {0.2, 0.6}) {
    Generator generator(13);
    const std::vector<double> dropped = scaled_dot_product_attention(x.q, x.k, eye(S), {}, p, false, generator).to_vector();
    const std::vector<double> plain = weights.to_vector();
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      if (dropped[i] == 0.0) ++zeros;
      else CHECK(std::abs(dropped[i] - plain[i] / (1 - p)) <= 1e-14);
    }
    const double n = static_cast<double>(plain.size()), rate = static_cast<double>(zeros) / n;
    CHECK(std::abs(rate - p) < 5 * std::sqrt(p * (1 - p) / n));  // 5 standard deviations of the drop rate
    // expected value unchanged: each row of the dropped weights sums to 1 on average
    CHECK(std::abs(sum(from_vector(dropped, {4, L, S}, f64())).item() / (4 * L) - 1.0) < 0.05);
  }
  Generator generator(14);
  CHECK(identical(scaled_dot_product_attention(x.q, x.k, x.v, {}, 1.0, false, generator), zeros({4, L, 1}, f64())));
}

TEST_CASE("attention gradients with dropout replay the forward's mask, to the second order") {
  rc::prop("fixed seed per evaluation", [] {
    const auto batch = *gen::shape(0, 2, 1, 2);
    const auto extent = [] { return *rc::gen::inRange<std::int64_t>(1, 4); };
    const Inputs x = random_inputs(*rc::gen::inRange<std::uint64_t>(0, 1000), batch, extent(), extent(), extent(),
                                   extent());
    const double p = *rc::gen::element(0.2, 0.5);
    const bool causal = *rc::gen::arbitrary<bool>();
    const auto f = [=](const std::vector<Tensor>& in) {
      Generator generator(99);  // the same mask at every evaluation
      return scaled_dot_product_attention(in[0], in[1], in[2], {}, p, causal, generator);
    };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{x.q, x.k, x.v}));
    TAPEGRAD_RC_GRADGRADCHECK(f, (std::vector<Tensor>{x.q, x.k, x.v}));
  });
}

TEST_CASE("a retained graph with dropout gives the same gradients on a second backward") {
  const Inputs x = random_inputs(5, {3}, 4, 6, 3, 2);
  Tensor q = x.q.detach().requires_grad_(), k = x.k.detach().requires_grad_(), v = x.v.detach().requires_grad_();
  Generator generator(21);
  const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.4, false, generator);
  const Tensor upstream = randn(out.shape(), generator, f64());
  const auto first = autograd::grad({out}, {q, k, v}, {upstream}, /*retain_graph=*/true, false);
  const auto second = autograd::grad({out}, {q, k, v}, {upstream}, /*retain_graph=*/true, false);
  const auto composed = autograd::grad({out}, {q, k, v}, {upstream}, false, /*create_graph=*/true);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(identical(first[i], second[i]));
    CHECK(allclose(first[i], composed[i], 1e-10, 1e-12));
  }
}
