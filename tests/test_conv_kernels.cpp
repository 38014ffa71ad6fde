// The kernels layer's convolution (kernels/conv2d.h) on both float32 paths, im2col + GEMM and oneDNN's primitives,
// against a direct convolution in double: forward (with and without the fused bias), input gradient, weight and
// bias gradients, over random shapes, strides, paddings, dilations and groups; float64 on im2col; the primitive
// cache's bound; thread counts and concurrent callers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include <tapegrad/framework/kernels/conv2d.h>
#include <tapegrad/framework/parallel.h>
#include "support/properties.h"

using tapegrad::kernels::ConvDirection;
using tapegrad::kernels::ConvGeometry;
using tapegrad::kernels::ConvPath;
namespace kernels = tapegrad::kernels;

namespace {

std::int64_t out_size(std::int64_t input, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                      std::int64_t dilation) {
  return (input + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

ConvGeometry geometry(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t o, std::int64_t kh,
                      std::int64_t kw, std::int64_t stride_h, std::int64_t stride_w, std::int64_t padding_h,
                      std::int64_t padding_w, std::int64_t dilation_h, std::int64_t dilation_w, std::int64_t groups) {
  return ConvGeometry{n,        c,         h,         w,          o,          kh,         kw,
                      out_size(h, kh, stride_h, padding_h, dilation_h),
                      out_size(w, kw, stride_w, padding_w, dilation_w),
                      stride_h, stride_w,  padding_h, padding_w,  dilation_h, dilation_w, groups};
}

// All four results of one problem, in double: out = conv(x, w) + b, and, for the output gradient gout,
// dx, dw and db. One loop over every (sample, output, position, tap) pair that reads the input. Each result
// also has its scale, the sum of its terms' magnitudes, which bounds a float sum's rounding error.
struct Results {
  std::vector<double> out, dx, dw, db;
  std::vector<double> out_scale, dx_scale, dw_scale, db_scale;
};

template <class T>
Results reference(const ConvGeometry& g, const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b,
                  const std::vector<T>& gout) {
  Results r;
  r.out = r.out_scale = std::vector<double>(gout.size());
  r.dx = r.dx_scale = std::vector<double>(x.size());
  r.dw = r.dw_scale = std::vector<double>(w.size());
  r.db = r.db_scale = std::vector<double>(static_cast<std::size_t>(g.o));
  const std::int64_t cg = g.cg(), og = g.og();
  for (std::int64_t s = 0; s < g.n; ++s)
    for (std::int64_t f = 0; f < g.o; ++f)
      for (std::int64_t i = 0; i < g.oh; ++i)
        for (std::int64_t j = 0; j < g.ow; ++j) {
          const auto o_at = static_cast<std::size_t>(((s * g.o + f) * g.oh + i) * g.ow + j);
          const double go = static_cast<double>(gout[o_at]);
          double total = b.empty() ? 0.0 : static_cast<double>(b[static_cast<std::size_t>(f)]);
          double scale = std::abs(total);
          r.db[static_cast<std::size_t>(f)] += go;
          r.db_scale[static_cast<std::size_t>(f)] += std::abs(go);
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t ki = 0; ki < g.kh; ++ki)
              for (std::int64_t kj = 0; kj < g.kw; ++kj) {
                const std::int64_t ih = i * g.stride_h - g.padding_h + ki * g.dilation_h;
                const std::int64_t iw = j * g.stride_w - g.padding_w + kj * g.dilation_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const auto x_at = static_cast<std::size_t>(((s * g.c + f / og * cg + ci) * g.h + ih) * g.w + iw);
                const auto w_at = static_cast<std::size_t>(((f * cg + ci) * g.kh + ki) * g.kw + kj);
                const double xv = static_cast<double>(x[x_at]), wv = static_cast<double>(w[w_at]);
                total += xv * wv;
                scale += std::abs(xv * wv);
                r.dx[x_at] += go * wv;
                r.dx_scale[x_at] += std::abs(go * wv);
                r.dw[w_at] += go * xv;
                r.dw_scale[w_at] += std::abs(go * xv);
              }
          r.out[o_at] = total;
          r.out_scale[o_at] = scale;
        }
  return r;
}

template <class T>
std::vector<T> random_values(std::size_t count) {
  std::vector<T> v(count);
  for (auto& value : v) value = static_cast<T>(*rc::gen::inRange(-1000, 1001)) / T(1000);
  return v;
}

// |got - want| <= tolerance * (1 + scale) element by element, scale the sum of the terms' magnitudes (a float
// sum's rounding error grows with it, not with |want|, which cancellation can make small); NaN fails.
template <class T>
bool close(const std::vector<T>& got, const std::vector<double>& want, const std::vector<double>& scale,
           double tolerance) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tolerance * (1.0 + scale[i]))) return false;
  return true;
}

// Bit equality (an empty vector has no data pointer, which memcmp must not see).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Every direction of one problem on `path`, checked against the double reference.
template <class T>
void check_all(const ConvGeometry& g, bool with_bias, ConvPath path, double tolerance) {
  const auto x = random_values<T>(static_cast<std::size_t>(g.n * g.c * g.h * g.w));
  const auto w = random_values<T>(static_cast<std::size_t>(g.o * g.cg() * g.kh * g.kw));
  const auto b = with_bias ? random_values<T>(static_cast<std::size_t>(g.o)) : std::vector<T>();
  const auto gout = random_values<T>(static_cast<std::size_t>(g.n * g.o * g.oh * g.ow));
  const Results want = reference(g, x, w, b, gout);
  // Note: the outputs start as NaN: every kernel must overwrite, never accumulate into, what it is given.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> out(gout.size(), nan), dx(x.size(), nan), dw(w.size(), nan), db(b.size(), nan);
  kernels::conv2d_forward(x.data(), w.data(), with_bias ? b.data() : nullptr, out.data(), g, path);
  RC_ASSERT(close(out, want.out, want.out_scale, tolerance));
  kernels::conv2d_input_grad(gout.data(), w.data(), dx.data(), g, path);
  RC_ASSERT(close(dx, want.dx, want.dx_scale, tolerance));
  kernels::conv2d_weight_grad(x.data(), gout.data(), dw.data(), with_bias ? db.data() : nullptr, g, path);
  RC_ASSERT(close(dw, want.dw, want.dw_scale, tolerance));
  if (with_bias) RC_ASSERT(close(db, want.db, want.db_scale, tolerance));
  // The combined backward (one reorder of grad_output for both primitives on oneDNN) gives the same bits.
  std::vector<T> dx2(x.size(), nan), dw2(w.size(), nan), db2(b.size(), nan);
  kernels::conv2d_backward(x.data(), gout.data(), w.data(), dx2.data(), dw2.data(), with_bias ? db2.data() : nullptr,
                           g, path);
  RC_ASSERT(same_bits(dx2, dx));
  RC_ASSERT(same_bits(dw2, dw));
  RC_ASSERT(same_bits(db2, db));
}

// A random geometry: small channel counts and the blocked ones oneDNN's direct kernels use (8, 16 and a tail).
ConvGeometry random_geometry() {
  const auto groups = *rc::gen::inRange<std::int64_t>(1, 4);
  const auto channels = rc::gen::oneOf(rc::gen::inRange<std::int64_t>(1, 5), rc::gen::element<std::int64_t>(8, 16, 19));
  const auto cg = *channels, og = *channels;
  const auto kh = *rc::gen::inRange<std::int64_t>(1, 4), kw = *rc::gen::inRange<std::int64_t>(1, 4);
  const auto sh = *rc::gen::inRange<std::int64_t>(1, 3), sw = *rc::gen::inRange<std::int64_t>(1, 3);
  const auto ph = *rc::gen::inRange<std::int64_t>(0, 3), pw = *rc::gen::inRange<std::int64_t>(0, 3);
  const auto dh = *rc::gen::inRange<std::int64_t>(1, 3), dw = *rc::gen::inRange<std::int64_t>(1, 3);
  const auto min_h = std::max<std::int64_t>(1, dh * (kh - 1) + 1 - 2 * ph);
  const auto min_w = std::max<std::int64_t>(1, dw * (kw - 1) + 1 - 2 * pw);
  const auto h = min_h + *rc::gen::inRange<std::int64_t>(0, 7), w = min_w + *rc::gen::inRange<std::int64_t>(0, 7);
  const auto n = *rc::gen::inRange<std::int64_t>(1, 4);
  return geometry(n, cg * groups, h, w, og * groups, kh, kw, sh, sw, ph, pw, dh, dw, groups);
}

// A small problem per index: distinct geometries for the cache test.
ConvGeometry small(std::int64_t index) { return geometry(1, 2, 3 + index, 4, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1); }

}  // namespace

TEST_CASE("float32 conv kernels on oneDNN match a float64 direct convolution for random problems") {
  rc::prop("onednn", [] { check_all<float>(random_geometry(), *rc::gen::arbitrary<bool>(), ConvPath::onednn, 2e-5); });
}

TEST_CASE("float32 conv kernels on im2col match a float64 direct convolution for random problems") {
  rc::prop("im2col", [] { check_all<float>(random_geometry(), *rc::gen::arbitrary<bool>(), ConvPath::im2col, 2e-5); });
}

TEST_CASE("float32 conv kernels on the automatic path match for random problems") {
  rc::prop("automatic", [] {
    check_all<float>(random_geometry(), *rc::gen::arbitrary<bool>(), ConvPath::automatic, 2e-5);
  });
}

TEST_CASE("float64 conv kernels (always im2col) match the direct convolution to double precision") {
  rc::prop("float64", [] {
    const ConvGeometry g = random_geometry();
    for (ConvDirection d : {ConvDirection::forward, ConvDirection::input_grad, ConvDirection::weight_grad})
      RC_ASSERT(kernels::conv2d_path(d, g, true) == ConvPath::im2col);
    // Note: a float64 call asking for oneDNN still runs im2col (oneDNN has no float64 convolution).
    check_all<double>(g, *rc::gen::arbitrary<bool>(), *rc::gen::element(ConvPath::automatic, ConvPath::onednn),
                      1e-12);
  });
}

TEST_CASE("the layer shapes of the cnn and resnet benchmarks agree on both paths, one and two threads") {
  // Bigger than the random problems: oneDNN's blocked direct kernels with their reorders, the batch split over
  // threads on im2col, a depthwise convolution.
  const std::vector<ConvGeometry> shapes{geometry(4, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1),
                                         geometry(4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1),
                                         geometry(3, 32, 16, 16, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1),
                                         geometry(3, 64, 8, 8, 128, 1, 1, 2, 2, 0, 0, 1, 1, 1),
                                         geometry(2, 32, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32)};
  rc::prop("layers", [&shapes] {
    const ConvGeometry g = *rc::gen::elementOf(shapes);
    tapegrad::set_num_threads(*rc::gen::inRange(1, 3));
    check_all<float>(g, *rc::gen::arbitrary<bool>(), *rc::gen::element(ConvPath::im2col, ConvPath::onednn), 2e-5);
    tapegrad::set_num_threads(1);
  });
  tapegrad::set_num_threads(1);
}

TEST_CASE("an empty batch computes nothing and gives zero weight and bias gradients on both paths") {
  const ConvGeometry g = geometry(0, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  for (ConvPath path : {ConvPath::im2col, ConvPath::onednn}) {
    std::vector<float> w(6 * 2 * 9, 1.0f), b(6, 1.0f), dw(w.size(), 7.0f), db(6, 7.0f);
    kernels::conv2d_forward(nullptr, w.data(), b.data(), nullptr, g, path);
    kernels::conv2d_input_grad(nullptr, w.data(), nullptr, g, path);
    kernels::conv2d_weight_grad(nullptr, nullptr, dw.data(), db.data(), g, path);
    CHECK(std::all_of(dw.begin(), dw.end(), [](float v) { return v == 0.0f; }));
    CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == 0.0f; }));
    std::fill(dw.begin(), dw.end(), 7.0f);
    std::fill(db.begin(), db.end(), 7.0f);
    kernels::conv2d_backward(nullptr, nullptr, w.data(), nullptr, dw.data(), db.data(), g, path);
    CHECK(std::all_of(dw.begin(), dw.end(), [](float v) { return v == 0.0f; }));
    CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_CASE("the oneDNN primitive cache is bounded and recomputes evicted shapes correctly") {
  const std::size_t capacity = kernels::conv2d_cache_capacity();
  REQUIRE(capacity > 0);
  REQUIRE(capacity < 1000);  // small enough to overflow here
  const std::int64_t shapes = static_cast<std::int64_t>(capacity) + 8;
  std::vector<float> first_out;
  const auto run = [](const ConvGeometry& g) {
    std::vector<float> x(static_cast<std::size_t>(g.n * g.c * g.h * g.w)), w(static_cast<std::size_t>(g.o * g.cg() * 4));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) - 2.0f;
    std::vector<float> out(static_cast<std::size_t>(g.n * g.o * g.oh * g.ow));
    kernels::conv2d_forward(x.data(), w.data(), nullptr, out.data(), g, ConvPath::onednn);
    return out;
  };
  for (std::int64_t i = 0; i < shapes; ++i) {
    const std::vector<float> out = run(small(i));
    if (i == 0) first_out = out;
    CHECK(kernels::conv2d_cache_size() <= capacity);
  }
  CHECK(kernels::conv2d_cache_size() == capacity);
  // The first shape was evicted (least recently used); it is built again and gives the same values.
  CHECK(run(small(0)) == first_out);
  CHECK(kernels::conv2d_cache_size() == capacity);
}

TEST_CASE("concurrent callers share the oneDNN primitives safely") {
  const ConvGeometry g = geometry(2, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  std::vector<float> x(static_cast<std::size_t>(g.n * g.c * g.h * g.w)), w(static_cast<std::size_t>(g.o * g.c * 9));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11) * 0.125f - 0.5f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
  const std::size_t out_size = static_cast<std::size_t>(g.n * g.o * g.oh * g.ow);
  std::vector<float> expected(out_size);
  kernels::conv2d_forward(x.data(), w.data(), nullptr, expected.data(), g, ConvPath::onednn);
  std::vector<std::vector<float>> outs(4, std::vector<float>(out_size));
  std::vector<std::thread> threads;
  for (auto& out : outs)
    threads.emplace_back([&] {
      for (int r = 0; r < 5; ++r) kernels::conv2d_forward(x.data(), w.data(), nullptr, out.data(), g, ConvPath::onednn);
    });
  for (auto& thread : threads) thread.join();
  for (const auto& out : outs) CHECK(out == expected);
}
