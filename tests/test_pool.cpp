// Pooling ops and layers: direct references, gradients over random options (distinct values for max
// pooling, so no window has a tie a finite difference could flip), second derivatives, closed forms,
// PyTorch's output-size and divisor rules, error messages, printing and clone.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

struct PoolCase {
  IntPair kernel = 1, stride = 1, padding = 0, dilation = 1;
  bool ceil_mode = false;
  std::int64_t n = 1, c = 1, h = 1, w = 1;
};

// PyTorch's pooling_output_shape, written out independently of the library.
std::int64_t out_size(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil) {
  const double span = static_cast<double>(size + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  std::int64_t out = static_cast<std::int64_t>(ceil ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil && (out - 1) * s >= size + p) --out;
  return out;
}

rc::Gen<PoolCase> raw_pool_case(bool dilated);

// Whether every window along one dim holds at least one input position (a dilated window may not).
bool windows_see_input(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil) {
  for (std::int64_t i = 0; i < out_size(size, k, s, p, d, ceil); ++i) {
    bool seen = false;
    for (std::int64_t a = 0; a < k; ++a) seen = seen || (i * s - p + a * d >= 0 && i * s - p + a * d < size);
    if (!seen) return false;
  }
  return true;
}

rc::Gen<PoolCase> pool_case(bool dilated) {
  return rc::gen::suchThat(raw_pool_case(dilated), [](const PoolCase& p) {
    return windows_see_input(p.h, p.kernel.h, p.stride.h, p.padding.h, p.dilation.h, p.ceil_mode) &&
           windows_see_input(p.w, p.kernel.w, p.stride.w, p.padding.w, p.dilation.w, p.ceil_mode);
  });
}

rc::Gen<PoolCase> raw_pool_case(bool dilated) {
  return rc::gen::exec([=] {
    PoolCase p;
    p.kernel = {*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4)};
    p.stride = {*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4)};
    p.padding = {*rc::gen::inRange<std::int64_t>(0, p.kernel.h / 2 + 1),
                 *rc::gen::inRange<std::int64_t>(0, p.kernel.w / 2 + 1)};
    if (dilated) p.dilation = {*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3)};
    p.ceil_mode = *rc::gen::arbitrary<bool>();
    p.n = *rc::gen::inRange<std::int64_t>(1, 3);
    p.c = *rc::gen::inRange<std::int64_t>(1, 3);
    p.h = std::max<std::int64_t>(1, p.dilation.h * (p.kernel.h - 1) + 1 - 2 * p.padding.h) +
          *rc::gen::inRange<std::int64_t>(0, 4);
    p.w = std::max<std::int64_t>(1, p.dilation.w * (p.kernel.w - 1) + 1 - 2 * p.padding.w) +
          *rc::gen::inRange<std::int64_t>(0, 4);
    return p;
  });
}

// Distinct values: a random permutation of 0..n-1, scaled and shifted, so every window has one maximum
// with a margin far above the finite-difference step.
rc::Gen<Tensor> distinct_tensor(Shape shape) {
  const auto n = static_cast<std::size_t>(shape_numel(shape));
  // Ranking random keys (ties broken by position) gives a random permutation.
  return rc::gen::map(rc::gen::container<std::vector<int>>(n, rc::gen::arbitrary<int>()),
                      [shape, n](const std::vector<int>& keys) {
                        std::vector<std::size_t> order(n);
                        std::iota(order.begin(), order.end(), std::size_t{0});
                        std::stable_sort(order.begin(), order.end(),
                                         [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
                        std::vector<double> values(n);
                        for (std::size_t rank = 0; rank < n; ++rank) values[order[rank]] = 0.1 * rank - 1.0;
                        return from_vector(values, shape, f64());
                      });
}

Shape input_shape(const PoolCase& p) { return {p.n, p.c, p.h, p.w}; }

// Direct max pooling: value and first-maximum index of every window, padding excluded.
std::pair<std::vector<double>, std::vector<double>> reference_max_pool(const Tensor& x, const PoolCase& p) {
  const auto oh = out_size(p.h, p.kernel.h, p.stride.h, p.padding.h, p.dilation.h, p.ceil_mode);
  const auto ow = out_size(p.w, p.kernel.w, p.stride.w, p.padding.w, p.dilation.w, p.ceil_mode);
  std::vector<double> values, indices;
  for (std::int64_t s = 0; s < p.n; ++s)
    for (std::int64_t c = 0; c < p.c; ++c)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double best = -INFINITY;
          std::int64_t where = -1;
          for (std::int64_t a = 0; a < p.kernel.h; ++a)
            for (std::int64_t b = 0; b < p.kernel.w; ++b) {
              const auto h = i * p.stride.h - p.padding.h + a * p.dilation.h;
              const auto w = j * p.stride.w - p.padding.w + b * p.dilation.w;
              if (h < 0 || h >= p.h || w < 0 || w >= p.w) continue;
              const double v = x.at({s, c, h, w});
              if (where < 0 || v > best) best = v, where = h * p.w + w;
            }
          values.push_back(best);
          indices.push_back(static_cast<double>(where));
        }
  return {values, indices};
}

// Direct average pooling with PyTorch's divisor rules, one window at a time.
std::vector<double> reference_avg_pool(const Tensor& x, const PoolCase& p, bool count_include_pad,
                                       std::int64_t divisor_override) {
  const auto oh = out_size(p.h, p.kernel.h, p.stride.h, p.padding.h, 1, p.ceil_mode);
  const auto ow = out_size(p.w, p.kernel.w, p.stride.w, p.padding.w, 1, p.ceil_mode);
  std::vector<double> out;
  for (std::int64_t s = 0; s < p.n; ++s)
    for (std::int64_t c = 0; c < p.c; ++c)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          std::int64_t h0 = i * p.stride.h - p.padding.h, w0 = j * p.stride.w - p.padding.w;
          std::int64_t h1 = std::min(h0 + p.kernel.h, p.h + p.padding.h);
          std::int64_t w1 = std::min(w0 + p.kernel.w, p.w + p.padding.w);
          const std::int64_t pool_size = (h1 - h0) * (w1 - w0);
          h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
          h1 = std::min(h1, p.h), w1 = std::min(w1, p.w);
          double total = 0;
          for (std::int64_t h = h0; h < h1; ++h)
            for (std::int64_t w = w0; w < w1; ++w) total += x.at({s, c, h, w});
          const std::int64_t divisor =
              divisor_override ? divisor_override : count_include_pad ? pool_size : (h1 - h0) * (w1 - w0);
          out.push_back(total / static_cast<double>(divisor));
        }
  return out;
}

}  // namespace

// ---- max pooling ----

TEST_CASE("max_pool2d matches a direct max pool, values and indices") {
  rc::prop("forward", [] {
    const PoolCase p = *pool_case(true);
    const Tensor x = *gen::tensor_of_shape(input_shape(p));  // ties allowed: the first maximum must win
    const auto [out, indices] = max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
    const auto [values, where] = reference_max_pool(x, p);
    RC_ASSERT(out.to_vector() == values);
    RC_ASSERT(indices.dtype() == DType::Int64);
    RC_ASSERT(indices.to_vector() == where);
  });
}

TEST_CASE("max_pool2d gradients match finite differences") {
  rc::prop("gradcheck", [] {
    const PoolCase p = *pool_case(true);
    const Tensor x = *distinct_tensor(input_shape(p));
    TAPEGRAD_RC_GRADCHECK(([&p](const std::vector<Tensor>& v) {
                            return max_pool2d(v[0], p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
                          }),
                          (std::vector<Tensor>{x}));
  });
}

TEST_CASE("max_pool2d second derivatives match finite differences") {
  // Squaring the pooled values makes the first derivative depend on x, so the gather and scatter that
  // form max pooling's backward are themselves differentiated.
  rc::prop("gradgradcheck", [] {
    const PoolCase p = *pool_case(true);
    const Tensor x = *distinct_tensor(input_shape(p));
    TAPEGRAD_RC_GRADGRADCHECK(([&p](const std::vector<Tensor>& v) {
                                const Tensor y = max_pool2d(v[0], p.kernel, p.stride, p.padding, p.dilation,
                                                            p.ceil_mode);
                                return y * y;
                              }),
                              (std::vector<Tensor>{x}));
  });
}

TEST_CASE("max_pool2d sends the gradient to the first maximum of a tie") {
  const Tensor x = tensor({1, 3, 3, 2}, {1, 1, 2, 2}, f64().with_requires_grad());
  const auto [y, indices] = max_pool2d_with_indices(x, 2);
  CHECK(y.item() == 3.0);
  CHECK(indices.item() == 1.0);
  y.backward(ones_like(y));
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 0});
  // Overlapping windows that share a maximum add up on it.
  const Tensor z = tensor({0, 5, 0, 0, 0, 0}, {1, 1, 2, 3}, f64().with_requires_grad());
  const Tensor pooled = max_pool2d(z, 2, 1);
  CHECK(pooled.to_vector() == std::vector<double>{5, 5});
  sum(pooled).backward();
  CHECK(z.grad().to_vector() == std::vector<double>{0, 2, 0, 0, 0, 0});
}

TEST_CASE("max_pool2d propagates NaN, pointing at the last NaN of the window as PyTorch does") {
  const double nan = std::nan("");
  const auto [y, indices] = max_pool2d_with_indices(tensor({nan, 9, nan, 1}, {1, 1, 2, 2}, f64()), 2);
  CHECK(std::isnan(y.item()));
  CHECK(indices.item() == 2.0);
  CHECK(max_pool2d(tensor({1, 9, 3, 1}, {1, 1, 2, 2}, f64()), 2).item() == 9.0);
}

// The 2x2, stride-2 pool has its own kernels (forward, and a backward that writes every element once).
// Reference with PyTorch's NaN rule: in tap order a NaN always wins, otherwise only a strictly greater value.
void reference_max_pool_2x2(const std::vector<double>& x, std::int64_t planes, std::int64_t h, std::int64_t w,
                            bool ceil_mode, std::vector<double>& values, std::vector<double>& indices) {
  const auto oh = out_size(h, 2, 2, 0, 1, ceil_mode), ow = out_size(w, 2, 2, 0, 1, ceil_mode);
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        double best = 0;
        std::int64_t where = -1;
        for (std::int64_t a = 0; a < 2; ++a)
          for (std::int64_t b = 0; b < 2; ++b) {
            const std::int64_t r = 2 * i + a, c = 2 * j + b;
            if (r >= h || c >= w) continue;
            const double v = x[static_cast<std::size_t>((p * h + r) * w + c)];
            if (where < 0 || std::isnan(v) || (!std::isnan(best) && v > best)) best = v, where = r * w + c;
          }
        values.push_back(best);
        indices.push_back(static_cast<double>(where));
      }
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); });
}

TEST_CASE("the 2x2 max pool matches a direct one with ties, NaNs and odd sizes, and scatters its gradient") {
  rc::prop("2x2 kernels, float32 and float64", [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 3), c = *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t h = *rc::gen::inRange<std::int64_t>(2, 36), w = *rc::gen::inRange<std::int64_t>(2, 36);
    const bool ceil_mode = *rc::gen::arbitrary<bool>();
    const DType dtype = *rc::gen::element(DType::Float32, DType::Float64);
    // Values from a handful of integers, so that windows tie; now and then a NaN.
    const auto count = static_cast<std::size_t>(n * c * h * w);
    std::vector<double> x = *rc::gen::container<std::vector<double>>(
        count, rc::gen::map(rc::gen::inRange(-3, 4), [](int v) { return static_cast<double>(v); }));
    if (*rc::gen::inRange(0, 3) == 0)
      for (int k = *rc::gen::inRange(1, 4); k > 0; --k)
        x[*rc::gen::inRange<std::size_t>(0, count)] = std::nan("");
    const Tensor input = from_vector(x, {n, c, h, w}, TensorOptions{}.with_dtype(dtype).with_requires_grad());
    const auto [y, indices] = max_pool2d_with_indices(input, 2, 2, 0, 1, ceil_mode);
    std::vector<double> values, where;
    reference_max_pool_2x2(x, n * c, h, w, ceil_mode, values, where);
    RC_ASSERT(same_values(y.to_vector(), values));
    RC_ASSERT(indices.to_vector() == where);

    // Distinct gradient values, one of them infinite: each reaches only its window's index.
    std::vector<double> gy(values.size());
    std::iota(gy.begin(), gy.end(), 1.0);
    gy.back() = INFINITY;
    y.backward(from_vector(gy, y.shape(), TensorOptions{}.with_dtype(dtype)));
    std::vector<double> expected(count, 0.0);
    const auto out_plane = static_cast<std::size_t>(y.size(2) * y.size(3));
    for (std::size_t k = 0; k < gy.size(); ++k)
      expected[k / out_plane * static_cast<std::size_t>(h * w) + static_cast<std::size_t>(where[k])] += gy[k];
    RC_ASSERT(input.grad().to_vector() == expected);

    // max_pool2d without indices saves the same argmax (as taps): same values, same gradient.
    const Tensor again = from_vector(x, {n, c, h, w}, TensorOptions{}.with_dtype(dtype).with_requires_grad());
    const Tensor z = max_pool2d(again, 2, 2, 0, 1, ceil_mode);
    RC_ASSERT(same_values(z.to_vector(), values));
    z.backward(from_vector(gy, z.shape(), TensorOptions{}.with_dtype(dtype)));
    RC_ASSERT(again.grad().to_vector() == expected);
  });
}

TEST_CASE("max_pool2d over disjoint 2x2 windows: gradients and second derivatives match finite differences") {
  // The usual CNN pool saves a one-byte tap per window instead of an index; its scatter and gather are their own
  // code, so they get the checks the general windows get above (which draw this geometry only rarely).
  rc::prop("gradcheck and gradgradcheck, kernel 2, stride 2", [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 3), c = *rc::gen::inRange<std::int64_t>(1, 3);
    const std::int64_t h = *rc::gen::inRange<std::int64_t>(2, 12), w = *rc::gen::inRange<std::int64_t>(2, 12);
    const bool ceil_mode = *rc::gen::arbitrary<bool>();
    const Tensor x = *distinct_tensor({n, c, h, w});
    const auto pool = [ceil_mode](const Tensor& v) { return max_pool2d(v, 2, 2, 0, 1, ceil_mode); };
    TAPEGRAD_RC_GRADCHECK(([&pool](const std::vector<Tensor>& v) { return pool(v[0]); }), (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(([&pool](const std::vector<Tensor>& v) {
                                const Tensor y = pool(v[0]);
                                return y * y;
                              }),
                              (std::vector<Tensor>{x}));
  });
}

TEST_CASE("the 2x2 max pool on a big threaded batch, one plane holding a NaN") {
  Generator gen(11);
  for (const DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = randn({4, 16, 28, 27}, gen, TensorOptions{}.with_dtype(dtype));
    std::vector<double> values = x.to_vector();
    values[5 * 28 * 27 + 100] = std::nan("");
    const Tensor input = from_vector(values, x.shape(), TensorOptions{}.with_dtype(dtype).with_requires_grad());
    const auto [y, indices] = max_pool2d_with_indices(input, 2);
    std::vector<double> expected_values, where;
    reference_max_pool_2x2(values, 64, 28, 27, false, expected_values, where);
    CHECK(same_values(y.to_vector(), expected_values));
    CHECK(indices.to_vector() == where);
    sum(y).backward();
    std::vector<double> expected(values.size(), 0.0);
    for (std::size_t k = 0; k < where.size(); ++k)
      expected[k / (14 * 13) * (28 * 27) + static_cast<std::size_t>(where[k])] = 1.0;
    CHECK(input.grad().to_vector() == expected);
  }
}

TEST_CASE("max_pool2d never picks the padding, even over negative values") {
  const Tensor x = full({1, 1, 2, 2}, -7.0, f64());
  CHECK(max_pool2d(x, 3, 1, 1).to_vector() == std::vector<double>{-7, -7, -7, -7});
}

TEST_CASE("max_pool2d on a big batch (threaded) matches the direct max pool") {
  const PoolCase p{3, 2, 1, 1, false, 4, 16, 15, 17};
  Generator gen(9);
  const Tensor x = randn(input_shape(p), gen, f64());
  CHECK(max_pool2d(x, p.kernel, p.stride, p.padding).to_vector() == reference_max_pool(x, p).first);
}

TEST_CASE("pool output sizes follow PyTorch's floor and ceil modes") {
  const Tensor x5 = zeros({1, 1, 5, 5}), x6 = zeros({1, 1, 6, 6}), x3 = zeros({1, 1, 3, 3});
  CHECK(max_pool2d(x5, 2).shape() == Shape{1, 1, 2, 2});
  CHECK(max_pool2d(x5, 2, 2, 0, 1, true).shape() == Shape{1, 1, 3, 3});
  CHECK(max_pool2d(x6, 3, 2, 1).shape() == Shape{1, 1, 3, 3});
  CHECK(max_pool2d(x6, 3, 2, 1, 1, true).shape() == Shape{1, 1, 4, 4});
  // The last ceil-mode window would start in the right padding, so it is dropped.
  CHECK(max_pool2d(x3, 2, 2, 1, 1, true).shape() == Shape{1, 1, 2, 2});
  CHECK(max_pool2d(zeros({1, 1, 9, 9}), 3, 1, 0, 2).shape() == Shape{1, 1, 5, 5});
  CHECK(max_pool2d(zeros({3, 6, 6}), 2).shape() == Shape{3, 3, 3});
}

TEST_CASE("max_pool2d names the problem") {
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 5, 5}), 3, 1, 2),
                    "max_pool2d: padding (2, 2) must be non-negative and at most half the kernel size (3, 3)");
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 1, 1}), 2),
                    "max_pool2d: input [1, 1, 1, 1] is too small for a kernel of 2 with padding 0 and dilation 1 "
                    "along dim 2");
  CHECK_THROWS_WITH(max_pool2d(zeros({5, 5}), 2),
                    "max_pool2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got [5, 5]");
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 4, 4}), 2, 0), "max_pool2d: stride must be positive, got (0, 0)");
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 1, 4}), 2, 1, 1, 2),
                    "max_pool2d: window 0 along dim 2 of input [1, 1, 1, 4] covers only padding (kernel 2, padding 1, "
                    "dilation 2)");
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 4, 4}, TensorOptions{}.with_dtype(DType::Int64)), 2),
                    "max_pool2d: expected a float32 or float64 tensor, got int64");
}

// ---- average pooling ----

TEST_CASE("avg_pool2d matches a direct average with PyTorch's divisors") {
  rc::prop("forward", [] {
    const PoolCase p = *pool_case(false);
    const bool include_pad = *rc::gen::arbitrary<bool>();
    const std::int64_t divisor = *rc::gen::element<std::int64_t>(0, 0, 3, 5);
    const Tensor x = *gen::tensor_of_shape(input_shape(p));
    const Tensor y = avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, include_pad,
                                divisor ? std::optional<std::int64_t>(divisor) : std::nullopt);
    const auto expected = reference_avg_pool(x, p, include_pad, divisor);
    RC_ASSERT(allclose(y, from_vector(expected, y.shape(), f64()), 1e-12, 1e-12));
  });
}

TEST_CASE("avg_pool2d gradients and second derivatives match finite differences") {
  rc::prop("gradcheck", [] {
    const PoolCase p = *pool_case(false);
    const bool include_pad = *rc::gen::arbitrary<bool>();
    const Tensor x = *gen::tensor_of_shape(input_shape(p));
    auto f = [&](const std::vector<Tensor>& v) {
      return avg_pool2d(v[0], p.kernel, p.stride, p.padding, p.ceil_mode, include_pad);
    };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(([&](const std::vector<Tensor>& v) { return f(v) * f(v); }), (std::vector<Tensor>{x}));
  });
}

TEST_CASE("avg_pool2d counts the padding unless told not to") {
  const Tensor x = ones({1, 1, 2, 2}, f64());
  CHECK(avg_pool2d(x, 2, 1, 1).to_vector() == std::vector<double>{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  CHECK(avg_pool2d(x, 2, 1, 1, false, false).to_vector() == std::vector<double>(9, 1.0));
  CHECK(avg_pool2d(x, 2, 1, 1, false, true, 2).to_vector() ==
        std::vector<double>{0.5, 1, 0.5, 1, 2, 1, 0.5, 1, 0.5});
  // In ceil mode, a window hanging past the padded input divides by its part inside it only.
  CHECK(avg_pool2d(ones({1, 1, 3, 3}, f64()), 2, 2, 0, true).to_vector() == std::vector<double>(4, 1.0));
  CHECK(avg_pool2d(ones({1, 1, 3, 3}, f64()), 2, 2, 1, true).to_vector() == std::vector<double>{0.25, 0.5, 0.5, 1});
}

TEST_CASE("avg_pool2d's gradient spreads each value evenly over its window") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 4}, f64().with_requires_grad());
  const Tensor y = avg_pool2d(x, 2);
  CHECK(y.to_vector() == std::vector<double>{3.5, 5.5});
  y.backward(tensor({4, 8}, {1, 1, 1, 2}, f64()));
  CHECK(x.grad().to_vector() == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2});
}

TEST_CASE("avg_pool2d names the problem") {
  CHECK_THROWS_WITH(avg_pool2d(zeros({1, 1, 4, 4}), 2, 2, 0, false, true, 0),
                    "avg_pool2d: divisor_override must be non-zero");
  CHECK_THROWS_WITH(avg_pool2d(zeros({1, 1, 4, 4}), 2, 2, 2),
                    "avg_pool2d: padding (2, 2) must be non-negative and at most half the kernel size (2, 2)");
}

// ---- adaptive average pooling ----

TEST_CASE("adaptive_avg_pool2d averages PyTorch's floor/ceil windows") {
  rc::prop("forward and gradients", [] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 3), c = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto h = *rc::gen::inRange<std::int64_t>(1, 6), w = *rc::gen::inRange<std::int64_t>(1, 6);
    const auto oh = *rc::gen::inRange<std::int64_t>(1, 7), ow = *rc::gen::inRange<std::int64_t>(1, 7);
    const Tensor x = *gen::tensor_of_shape({n, c, h, w});
    const Tensor y = adaptive_avg_pool2d(x, {oh, ow});
    RC_ASSERT(y.shape() == (Shape{n, c, oh, ow}));
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t k = 0; k < c; ++k)
        for (std::int64_t i = 0; i < oh; ++i)
          for (std::int64_t j = 0; j < ow; ++j) {
            const auto h0 = static_cast<std::int64_t>(std::floor(static_cast<double>(i * h) / oh));
            const auto h1 = static_cast<std::int64_t>(std::ceil(static_cast<double>((i + 1) * h) / oh));
            const auto w0 = static_cast<std::int64_t>(std::floor(static_cast<double>(j * w) / ow));
            const auto w1 = static_cast<std::int64_t>(std::ceil(static_cast<double>((j + 1) * w) / ow));
            double total = 0;
            for (auto a = h0; a < h1; ++a)
              for (auto b = w0; b < w1; ++b) total += x.at({s, k, a, b});
            RC_ASSERT(std::abs(y.at({s, k, i, j}) - total / static_cast<double>((h1 - h0) * (w1 - w0))) < 1e-12);
          }
    auto f = [&](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], {oh, ow}); };
    TAPEGRAD_RC_GRADCHECK(f, (std::vector<Tensor>{x}));
    TAPEGRAD_RC_GRADGRADCHECK(([&](const std::vector<Tensor>& v) { return f(v) * f(v); }), (std::vector<Tensor>{x}));
  });
}

TEST_CASE("adaptive_avg_pool2d to 1x1 is the plane mean; to the input size it is the identity") {
  Generator gen(2);
  const Tensor x = randn({2, 3, 5, 7}, gen, f64());
  CHECK(allclose(adaptive_avg_pool2d(x, 1), mean(x, {2, 3}, true), 1e-12, 1e-12));
  CHECK(allclose(adaptive_avg_pool2d(x, {5, 7}), x, 0, 0));
  CHECK(adaptive_avg_pool2d(zeros({3, 4, 4}), 2).shape() == Shape{3, 2, 2});
  CHECK_THROWS_WITH(adaptive_avg_pool2d(zeros({1, 1, 0, 4}), 2),
                    "adaptive_avg_pool2d: expected a non-empty H x W plane, got input [1, 1, 0, 4]");
}

// ---- layers ----

TEST_CASE("pooling layers forward to the ops, hold no parameters and print like PyTorch") {
  Generator gen(4);
  const Tensor x = randn({2, 3, 8, 8}, gen);
  nn::MaxPool2d max_pool(2);
  CHECK(max_pool.parameters().empty());
  CHECK(max_pool(x).to_vector() == max_pool2d(x, 2).to_vector());
  CHECK(max_pool.extra_repr() == "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false");
  nn::MaxPool2d custom(nn::MaxPool2dOptions{{3, 2}}.with_stride(1).with_padding({1, 0}).with_ceil_mode(true));
  CHECK(custom.extra_repr() == "kernel_size=(3, 2), stride=1, padding=(1, 0), dilation=1, ceil_mode=true");
  CHECK(custom(x).to_vector() == max_pool2d(x, {3, 2}, 1, {1, 0}, 1, true).to_vector());

  nn::AvgPool2d avg_pool(nn::AvgPool2dOptions{3}.with_stride(2).with_padding(1).with_count_include_pad(false));
  CHECK(avg_pool(x).to_vector() == avg_pool2d(x, 3, 2, 1, false, false).to_vector());
  CHECK(avg_pool.extra_repr() == "kernel_size=3, stride=2, padding=1, count_include_pad=false");
  CHECK(nn::AvgPool2d(2).extra_repr() == "kernel_size=2, stride=2, padding=0");

  nn::AdaptiveAvgPool2d adaptive({5, 7});
  CHECK(adaptive(x).shape() == Shape{2, 3, 5, 7});
  CHECK(adaptive.extra_repr() == "output_size=(5, 7)");
  CHECK(nn::AdaptiveAvgPool2d(1).extra_repr() == "output_size=1");
}

TEST_CASE("pooling layers clone with their options") {
  const Tensor x = randn({1, 2, 6, 6});
  nn::MaxPool2d max_pool(nn::MaxPool2dOptions{3}.with_stride(2).with_padding(1));
  nn::AvgPool2d avg_pool(nn::AvgPool2dOptions{2}.with_divisor_override(3));
  nn::AdaptiveAvgPool2d adaptive(4);
  for (nn::Module* m : std::vector<nn::Module*>{&max_pool, &avg_pool, &adaptive}) {
    auto copy = m->clone();
    CHECK(copy->type_name() == m->type_name());
    CHECK(copy->extra_repr() == m->extra_repr());
    CHECK(copy->forward(x).to_vector() == m->forward(x).to_vector());
  }
}
