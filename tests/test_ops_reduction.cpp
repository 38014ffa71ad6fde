// Reductions and normalisations: gradient properties (first and second order), closed forms, ties, messages.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

/// A float64 tensor whose values are all distinct (0.3 apart, in random order), so max and min are
/// differentiable everywhere finite differences look.
rc::Gen<Tensor> distinct_tensor(int min_dims, int max_dims, std::int64_t max_extent) {
  return rc::gen::mapcat(gen::shape(min_dims, max_dims, 1, max_extent), [](const Shape& s) {
    const auto n = static_cast<std::size_t>(shape_numel(s));
    return rc::gen::map(rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, 1000000)),
                        [s, n](const std::vector<int>& keys) {
                          std::vector<std::size_t> order(n);
                          std::iota(order.begin(), order.end(), std::size_t{0});
                          std::stable_sort(order.begin(), order.end(),
                                           [&](std::size_t i, std::size_t j) { return keys[i] < keys[j]; });
                          std::vector<double> values(n);
                          for (std::size_t rank = 0; rank < n; ++rank)
                            values[order[rank]] = 0.3 * (static_cast<double>(rank) - static_cast<double>(n) / 2);
                          return from_vector(values, s, TensorOptions{}.with_dtype(DType::Float64));
                        });
  });
}

/// A random subset of `ndim` dims (possibly empty), last first, some written as negative numbers.
std::vector<std::int64_t> some_dims(std::int64_t ndim) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = ndim; d-- > 0;)
    if (*rc::gen::arbitrary<bool>()) dims.push_back(*rc::gen::arbitrary<bool>() ? d : d - ndim);
  return dims;
}

/// One dim of a tensor of `ndim` >= 1 dims, possibly negative.
std::int64_t one_dim(std::int64_t ndim) { return *rc::gen::inRange<std::int64_t>(-ndim, ndim); }

std::vector<Tensor> just(const Tensor& x) { return std::vector<Tensor>{x}; }

}  // namespace

TEST_CASE("max and min along a dim: gradient to the extremum, values agree with amax, indices with argmax") {
  rc::prop("max/min(x, dim, keepdim)", [] {
    const Tensor x = *distinct_tensor(1, 3, 4);
    const std::int64_t dim = one_dim(x.dim());
    const bool keepdim = *rc::gen::arbitrary<bool>();
    const bool is_max = *rc::gen::arbitrary<bool>();
    auto f = [=](const std::vector<Tensor>& in) {
      return is_max ? max(in[0], dim, keepdim).values : min(in[0], dim, keepdim).values;
    };
    TAPEGRAD_RC_GRADCHECK(f, just(x));
    auto [values, indices] = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
    RC_ASSERT(indices.dtype() == DType::Int64);
    RC_ASSERT(values.shape() == indices.shape());
    RC_ASSERT(identical(values, is_max ? amax(x, {dim}, keepdim) : amin(x, {dim}, keepdim)));
    RC_ASSERT(identical(indices, is_max ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim)));
  });
}

TEST_CASE("amax, amin, max() and min() gradients over random dims") {
  rc::prop("amax/amin(x, dims, keepdim), max(x), min(x)", [] {
    const Tensor x = *distinct_tensor(0, 3, 4);
    const auto dims = some_dims(x.dim());
    const bool keepdim = *rc::gen::arbitrary<bool>();
    const int which = *rc::gen::inRange(0, 4);
    TAPEGRAD_RC_GRADCHECK(([=](const std::vector<Tensor>& in) {
                            switch (which) {
                              case 0: return amax(in[0], dims, keepdim);
                              case 1: return amin(in[0], dims, keepdim);
                              case 2: return max(in[0]);
                              default: return min(in[0]);
                            }
                          }),
                          just(x));
  });
}

TEST_CASE("var and std_dev gradients over random dims, corrections and keepdim") {
  rc::prop("var/std_dev(x, dims, correction, keepdim)", [] {
    const Tensor x = *gen::tensor(3, 4);
    const auto dims = some_dims(x.dim());
    // only corrections that leave n - correction > 0, where the variance is finite
    std::int64_t count = 1;
    for (auto d : dims) count *= x.size(d);
    const std::int64_t correction = count > 1 ? *rc::gen::inRange<std::int64_t>(0, 2) : 0;
    const bool keepdim = *rc::gen::arbitrary<bool>();
    const bool standard_deviation = *rc::gen::arbitrary<bool>();
    // std_dev has no derivative at a zero variance (one element per slice, or equal elements: the generator
    // draws from a grid, so ties happen), and finite differences mislead close to one.
    bool spread = count > 1;
    for (double v : var(x, dims, 0).to_vector()) spread = spread && v > 1e-4;
    TAPEGRAD_RC_GRADCHECK(([=](const std::vector<Tensor>& in) {
                            if (standard_deviation && spread) return std_dev(in[0], dims, correction, keepdim);
                            return var(in[0], dims, correction, keepdim);
                          }),
                          just(x));
  });
}

TEST_CASE("logsumexp, softmax and log_softmax gradients") {
  rc::prop("logsumexp(x, dims, keepdim)", [] {
    const Tensor x = *gen::tensor(3, 4, -3.0, 3.0);
    const auto dims = some_dims(x.dim());
    const bool keepdim = *rc::gen::arbitrary<bool>();
    TAPEGRAD_RC_GRADCHECK([=](const std::vector<Tensor>& in) { return logsumexp(in[0], dims, keepdim); }, just(x));
  });
  rc::prop("softmax/log_softmax(x, dim)", [] {
    const Tensor x = *gen::tensor(3, 4, -3.0, 3.0);
    const std::int64_t dim = one_dim(std::max<std::int64_t>(x.dim(), 1));
    const bool log_form = *rc::gen::arbitrary<bool>();
    TAPEGRAD_RC_GRADCHECK(
        [=](const std::vector<Tensor>& in) { return log_form ? log_softmax(in[0], dim) : softmax(in[0], dim); },
        just(x));
  });
}

TEST_CASE("second derivatives of reductions match finite differences") {
  rc::prop("var, logsumexp, softmax, log_softmax, max(exp(x), dim), amin", [] {
    const Tensor x = *distinct_tensor(1, 2, 3);
    const std::int64_t dim = one_dim(x.dim());
    const int which = *rc::gen::inRange(0, 7);
    TAPEGRAD_RC_GRADGRADCHECK(([=](const std::vector<Tensor>& in) {
                                const Tensor& v = in[0];
                                switch (which) {
                                  case 0: return var(v, {dim}, v.size(dim) > 1 ? 1 : 0, false);
                                  case 1: return logsumexp(v, {dim}, true);
                                  case 2: return softmax(v, dim);
                                  case 3: return log_softmax(v, dim);
                                  case 4: return max(exp(v), dim).values;  // exp keeps the values distinct
                                  case 5: return mul(amin(v, {dim}, true), v);
                                  default:  // std_dev of one value has no derivative (sqrt at 0)
                                    return v.numel() > 1 ? std_dev(add(mul(v, v), 1.0)) : var(v, {dim}, 0, false);
                                }
                              }),
                              just(x));
  });
}

TEST_CASE("fused first-order backward of softmax, log_softmax and logsumexp equals the create_graph one") {
  rc::prop("plain vs create_graph gradients", [] {
    const Tensor values = *gen::tensor(3, 4, -3.0, 3.0);
    const std::int64_t dim = one_dim(std::max<std::int64_t>(values.dim(), 1));
    const int which = *rc::gen::inRange(0, 3);
    auto f = [=](const Tensor& v) {
      if (which == 0) return softmax(v, dim);
      if (which == 1) return log_softmax(v, dim);
      return logsumexp(v, values.dim() == 0 ? std::vector<std::int64_t>{} : std::vector{dim}, true);
    };
    Tensor x = values.clone().requires_grad_();
    const Tensor y = f(x);
    const Tensor upstream = randn(y.shape(), default_generator(), f64());
    const Tensor plain = autograd::grad({f(x)}, {x}, {upstream})[0];
    const Tensor composed = autograd::grad({f(x)}, {x}, {upstream}, false, /*create_graph=*/true)[0];
    RC_ASSERT(allclose(plain, composed.detach(), 1e-10, 1e-13));
  });
}

TEST_CASE("softmax slices sum to 1 and huge logits stay finite") {
  const Tensor x = tensor({1.0, 2.0, 3.0, 1000.0, 0.0, -1000.0}, {2, 3}, f64());
  const Tensor rows = softmax(x, 1);
  CHECK(allclose(sum(rows, {1}), ones({2}, f64()), 1e-15, 1e-15));
  CHECK(rows.at({1, 0}) == 1.0);
  CHECK(rows.at({1, 2}) == 0.0);
  const Tensor columns = softmax(x, 0);
  CHECK(allclose(sum(columns, {0}), ones({3}, f64()), 1e-15, 1e-15));
  const Tensor huge = tensor({1e30, 0.0, -1e30}, {3}, f64());
  const auto ls = log_softmax(huge, 0).to_vector();
  CHECK(ls[0] == 0.0);
  CHECK(ls[1] == -1e30);
  CHECK(std::isfinite(ls[2]));
  const auto ls32 = log_softmax(tensor({3e38f, 0.0}, {2}), -1).to_vector();
  CHECK(ls32[0] == 0.0);
  CHECK(std::isfinite(ls32[1]));
  CHECK(softmax(scalar_tensor(5.0), 0).item() == 1.0);
  const Tensor lse = logsumexp(tensor({1000.0, 1000.0}, {2}, f64()), {0});
  CHECK(lse.item() == Approx(1000.0 + std::log(2.0)).epsilon(1e-15));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(logsumexp(tensor({-inf, -inf}, {2}, f64()), {0}).item() == -inf);
  CHECK(logsumexp(tensor({inf, 0.0}, {2}, f64()), {0}).item() == inf);
  CHECK(allclose(exp(log_softmax(x, 1)), rows, 1e-14, 1e-300));
}

TEST_CASE("max along a dim sends the gradient to the first maximum; amax and max() share it between ties") {
  Tensor x = tensor({1.0, 3.0, 3.0, 2.0, 2.0, 0.0}, {2, 3}, f64_grad());
  auto [values, indices] = max(x, 1);
  CHECK(values.to_vector() == std::vector<double>{3.0, 2.0});
  CHECK(indices.to_vector() == std::vector<double>{1.0, 0.0});
  sum(values).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 1, 0, 0});
  x.set_grad(Tensor());
  sum(amax(x, {1})).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 0.5, 0.5, 0.5, 0});
  x.set_grad(Tensor());
  max(x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 0.5, 0, 0, 0});
  CHECK(min(x).item() == 0.0);
  CHECK(min(x, 0, /*keepdim=*/true).values.shape() == Shape{1, 3});
  CHECK(argmin(x, 0).to_vector() == std::vector<double>{0, 1, 1});
  CHECK(amax(x, {0, 1}, true).shape() == Shape{1, 1});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(max(tensor({1.0, nan, 5.0}, {3}, f64())).item()));
  CHECK(max(tensor({1.0, nan, 5.0}, {3}, f64()), 0).indices.item() == 1.0);
}

TEST_CASE("var matches the closed forms, biased and unbiased") {
  const Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 10.0, 10.0}, {3, 2}, f64());
  CHECK(var(x).item() == Approx(16.0).epsilon(1e-14));
  CHECK(var(x, {0, 1}, 0).item() == Approx(80.0 / 6).epsilon(1e-14));
  CHECK(var(x, {1}).to_vector() == std::vector<double>{0.5, 0.5, 0.0});
  CHECK(var(x, {-2}, 0, true).shape() == Shape{1, 2});
  CHECK(std_dev(x, {1}, 0).to_vector() == std::vector<double>{0.5, 0.5, 0.0});
  CHECK(std::isnan(var(tensor({7.0}, {1}, f64())).item()));  // n - 1 = 0, as PyTorch
  // a large mean does not cancel the spread away
  CHECK(var(tensor({1e9 + 1, 1e9 + 2, 1e9 + 3}, {3}, f64())).item() == 1.0);
  Tensor w = tensor({1.0, 2.0, 6.0}, {3}, f64_grad());
  var(w, {0}, 0).backward();  // d/dw mean((w - 3)^2) = 2 (w - 3) / 3
  CHECK(allclose(w.grad(), tensor({-4.0 / 3, -2.0 / 3, 2.0}, {3}, f64()), 1e-14, 1e-14));
}

TEST_CASE("float32 sums over 2^20 terms stay within a few ulps: sum, mean and broadcast gradients") {
  // Note: 0.1f is not a power of two, so a float32 running sum rounds at every step once the total is large
  // (it drifted by ~1% here); the exact total of 2^20 copies of 0.1f is 2^20 * (double)0.1f.
  const std::int64_t n = std::int64_t{1} << 20;
  const double exact = static_cast<double>(n) * static_cast<double>(0.1f);
  auto close = [&](double value) { return std::abs(value - exact) <= 4 * 1.2e-7 * exact; };
  for (double v : sum(full({n, 3}, 0.1), {0}).to_vector()) CHECK(close(v));     // down the rows
  for (double v : sum(full({3, n}, 0.1), {1}).to_vector()) CHECK(close(v));     // along each row
  for (double v : sum(full({4, n / 4, 2}, 0.1), {0, 1}).to_vector()) CHECK(close(v));
  for (double v : sum(full({2, n, 2}, 0.1), {1}).to_vector()) CHECK(close(v));  // a middle dim
  CHECK(close(sum(full({n}, 0.1)).item()));
  for (double v : mean(full({n, 2}, 0.1), {0}).to_vector()) CHECK(std::abs(v - 0.1f) <= 4 * 1.2e-7 * 0.1);
  // A bias broadcast over n rows: its gradient is the same sum.
  Tensor bias = zeros({3}, TensorOptions{}.with_requires_grad());
  sum(add(zeros({n, 3}), bias) * full({n, 3}, 0.1)).backward();
  for (double v : bias.grad().to_vector()) CHECK(close(v));
}

TEST_CASE("reductions reject bad dims and empty input with the op and the shapes") {
  CHECK_THROWS_WITH(max(zeros({2, 0}), 1), "max: cannot reduce over dim 1 of size 0 in shape [2, 0]");
  CHECK_THROWS_WITH(amax(zeros({0, 3}), {0}), "amax: cannot reduce an empty dim of shape [0, 3]");
  CHECK_THROWS_WITH(max(zeros({0})), "max: cannot reduce an empty dim of shape [0]");
  CHECK_THROWS_WITH(softmax(zeros({2, 3}), 2), "softmax: dim 2 is out of range for a tensor of 2 dims");
  CHECK_THROWS_WITH(var(zeros({2, 3}), {1, -1}), "var: dim -1 given twice");
  CHECK_THROWS_WITH(var(zeros({2}), {0}, -1), "var: correction must be non-negative, got -1");
  CHECK_THROWS_WITH(logsumexp(zeros({2}), {3}), "logsumexp: dim 3 is out of range for a tensor of 1 dims");
  CHECK_THROWS_WITH(log_softmax(zeros({2}, TensorOptions{}.with_dtype(DType::Int64)), 0),
                    "log_softmax: expected a float32 or float64 tensor, got int64");
}
