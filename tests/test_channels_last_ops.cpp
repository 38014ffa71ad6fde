// Channels-last tensors (issue 42 item 1): the layout rules and the output formats against PyTorch 1.13
// (tests/data/channels_last_reference.txt, written by tests/reference/make_channels_last_reference.py), and
// properties that every op gives the same values and gradients on a channels-last copy as on the row-major tensor.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/error_of.h"
#include "support/channels_last_cases.h"
#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/framework/detail/tensor_impl.h>  // detail::make_view: a layout with any strides
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::binary_ops;
using tapegrad::testing::error_of;
using tapegrad::testing::identical;

namespace {

constexpr MemoryFormat CL = MemoryFormat::ChannelsLast;

const std::map<std::string, Tensor>& reference() {
  static const auto ref = tapegrad::testing::load_reference_file("channels_last_reference.txt");
  return ref;
}
std::vector<double> answer(const std::string& key) {
  return tapegrad::testing::reference_entry(reference(), key).to_vector();
}
Shape as_shape(const std::string& key) {
  Shape s;
  for (double v : answer(key)) s.push_back(static_cast<std::int64_t>(v));
  return s;
}
// [is_contiguous(), is_contiguous(ChannelsLast)], as the reference script's fmt_pair.
std::vector<double> formats(const Tensor& t) {
  return {t.is_contiguous() ? 1.0 : 0.0, t.dim() == 4 && t.is_contiguous(CL) ? 1.0 : 0.0};
}
void append(std::vector<double>& to, const std::vector<double>& more) { to.insert(to.end(), more.begin(), more.end()); }

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
// A float64 leaf of `shape` in format 'r' (row-major) or 'c' (channels-last), values in [0.5, 1.5).
Tensor leaf(const Shape& shape, char format, std::uint64_t seed) {
  Generator g(seed);
  Tensor t = add(rand(shape, g, f64()), 0.5);
  if (format == 'c') t = t.contiguous(CL);
  return t.detach().requires_grad_();
}

}  // namespace

// ---- the layout rules ----

TEST_CASE("is_contiguous(format) and suggest_memory_format follow PyTorch 1.13 on every reference layout") {
  int cases = 0;
  for (int k = 0; reference().count(fmt::format("layout/{}/sizes", k)); ++k, ++cases) {
    const Shape sizes = as_shape(fmt::format("layout/{}/sizes", k));
    const Shape strides = as_shape(fmt::format("layout/{}/strides", k));
    const std::vector<double> want = answer(fmt::format("layout/{}/answer", k));
    std::int64_t extent = 1;
    for (std::size_t d = 0; d < sizes.size(); ++d) extent += std::max<std::int64_t>(sizes[d] - 1, 0) * strides[d];
    const Tensor t = detail::make_view(zeros({extent}), sizes, strides, 0);
    INFO("layout " << k << ": sizes " << shape_string(sizes) << " strides " << shape_string(strides));
    CHECK(t.is_contiguous() == (want[0] == 1.0));
    CHECK(t.is_contiguous(CL) == (want[1] == 1.0));
    if (want[2] >= 0.0) CHECK((t.suggest_memory_format() == CL) == (want[2] == 1.0));
  }
  CHECK(cases == 45);
}

TEST_CASE("contiguous(ChannelsLast) lays out the NHWC array and keeps the values; data(format) checks the layout") {
  const Tensor x = arange(0.0, 24.0, 1.0, DType::Float64).reshape({1, 2, 3, 4});
  const Tensor y = x.contiguous(CL);
  CHECK(y.strides() == Shape{24, 1, 8, 2});
  CHECK(!y.is_contiguous());
  CHECK(y.is_contiguous(CL));
  CHECK(y.suggest_memory_format() == CL);
  CHECK(y.contiguous(CL).is_same(y));
  CHECK(identical(y, x));
  const double* nhwc = y.data<double>(CL);
  CHECK(nhwc[1] == 12.0);  // (n, h, w, c) = (0, 0, 0, 1) is element (0, 1, 0, 0)
  CHECK(nhwc[2] == 1.0);   // (0, 0, 1, 0) is element (0, 0, 0, 1)
  CHECK(identical(y.contiguous(), x));
  CHECK(y.contiguous().is_contiguous());
  CHECK(x.contiguous(MemoryFormat::Contiguous).is_same(x));
  CHECK_THAT(error_of([&] { (void)y.data<double>(); }), Catch::Contains("non-contiguous"));
  CHECK_THAT(error_of([&] { (void)x.data<double>(CL); }),
             Catch::Contains("not contiguous in memory format ChannelsLast") && Catch::Contains("[24, 12, 4, 1]"));
  CHECK_THAT(error_of([&] { (void)arange(6).reshape({2, 3}).contiguous(CL); }),
             Catch::Contains("ChannelsLast needs a 4-d") && Catch::Contains("[2, 3]"));
  CHECK_THAT(error_of([&] { (void)x.is_contiguous(MemoryFormat::Preserve); }), Catch::Contains("Preserve"));
  CHECK_THAT(error_of([&] { (void)x.contiguous(MemoryFormat::Preserve); }),
             Catch::Contains("contiguous: memory format Preserve is not a layout") && Catch::Contains("[1, 2, 3, 4]"));
  CHECK_THAT(error_of([&] { (void)empty({2, 3}, DType::Float32, CL); }), Catch::Contains("4-d"));
  // A channels-last slice is neither; contiguous(CL) copies it.
  const Tensor sliced = y.narrow(3, 1, 2);
  CHECK(!sliced.is_contiguous(CL));
  CHECK(sliced.suggest_memory_format() == CL);
  CHECK(identical(sliced.contiguous(CL), x.narrow(3, 1, 2)));
  CHECK(sliced.contiguous(CL).is_contiguous(CL));
}


TEST_CASE("dense conversions both ways place every element, for every dtype, partial tiles, offsets and threads") {
  // Note: dense tensors convert by a tiled transpose of each sample's plane (detail/plane_transpose.h, 32 x 32
  // tiles): these shapes leave partial tiles on both sides, one is long enough to split across threads, and the
  // narrowed hosts start at a storage offset. Each element is checked against its index, not another conversion.
  const auto value = [](std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
    return static_cast<double>((n * 7 + c * 13 + h * 3 + w) % 251);  // exact in every dtype, bfloat16 included
  };
  const int threads = get_num_threads();
  set_num_threads(2);
  for (const Shape& shape : {Shape{3, 37, 5, 9}, Shape{2, 70, 33, 2}, Shape{1, 1, 1, 1}, Shape{2, 64, 32, 33},
                             Shape{2, 3, 1, 40}, Shape{0, 5, 2, 2}}) {
    const std::int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
    std::vector<double> values;
    for (std::int64_t n = 0; n < N + 1; ++n)  // one extra sample: the narrowed views start past it
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t w = 0; w < W; ++w) values.push_back(value(n, c, h, w));
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16}) {
      CAPTURE(shape_string(shape), dtype_name(dtype));
      const Tensor host = from_vector(values, {N + 1, C, H, W}).to(dtype);
      const Tensor x = host.narrow(0, 1, N);  // row-major, dense, at an offset of one sample
      REQUIRE(x.is_contiguous());
      const Tensor y = x.contiguous(CL);
      REQUIRE(y.is_contiguous(CL));
      const std::vector<double> nhwc = y.permute({0, 2, 3, 1}).contiguous().to_vector();
      bool placed = true;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t w = 0; w < W; ++w)
            for (std::int64_t c = 0; c < C; ++c)
              placed = placed && nhwc[static_cast<std::size_t>(((n * H + h) * W + w) * C + c)] == value(n + 1, c, h, w);
      CHECK(placed);
      // And back: a dense channels-last tensor at an offset (a narrowed channels-last host) to row-major.
      const Tensor cl_view = host.contiguous(CL).narrow(0, 1, N);
      REQUIRE(cl_view.is_contiguous(CL));
      const Tensor back = cl_view.contiguous();
      REQUIRE(back.is_contiguous());
      CHECK(back.to_vector() == std::vector<double>(values.begin() + C * H * W, values.end()));
    }
  }
  set_num_threads(threads);
}
TEST_CASE("empty, empty_like and the *_like factories keep channels-last (PyTorch's Preserve)") {
  const Tensor x = leaf({2, 3, 4, 5}, 'c', 1).detach();
  const std::vector<double> want = answer("misc/answer");  // empty_like, zeros_like, ones_like first
  CHECK(formats(empty_like(x)) == std::vector<double>{want[0], want[1]});
  CHECK(formats(zeros_like(x)) == std::vector<double>{want[2], want[3]});
  CHECK(formats(ones_like(x)) == std::vector<double>{want[4], want[5]});
  CHECK(formats(x.contiguous()) == std::vector<double>{want[10], want[11]});
  CHECK(formats(empty_like(x, MemoryFormat::Contiguous)) == std::vector<double>{1.0, 0.0});
  CHECK(identical(zeros_like(x), zeros({2, 3, 4, 5}, f64())));
  CHECK(identical(full_like(x, 2.5), full({2, 3, 4, 5}, 2.5, f64())));
  CHECK(empty({2, 3, 4, 5}, DType::Float32, CL).strides() == Shape{60, 1, 15, 3});
  // Created channels-last, a [N, C, 1, 1] tensor carries NHWC strides along its size-1 dims too (as PyTorch's).
  const Tensor pooled_shape = empty({8, 64, 1, 1}, DType::Float32, CL);
  CHECK(pooled_shape.is_contiguous());
  CHECK(pooled_shape.suggest_memory_format() == CL);
  CHECK(empty({8, 64, 1, 1}).suggest_memory_format() == MemoryFormat::Contiguous);
  // As PyTorch: view cannot flatten a channels-last tensor; reshape copies.
  CHECK(answer("misc/view_flat_ok") == std::vector<double>{0.0});
  CHECK_THAT(error_of([&] { (void)x.view({2, -1}); }), Catch::Contains("view"));
  CHECK(identical(x.reshape({2, -1}), x.contiguous().view({2, -1})));
}

// ---- ops that keep the format ----

namespace {
using Unary = std::function<Tensor(const Tensor&)>;
std::vector<std::pair<const char*, Unary>> unary_ops() {
  return {{"relu", [](const Tensor& t) { return relu(t); }},
          {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
          {"tanh", [](const Tensor& t) { return tanh(t); }},
          {"mul scalar", [](const Tensor& t) { return mul(t, 2.5); }},
          {"add scalar", [](const Tensor& t) { return add(t, 1.0); }},
          {"exp", [](const Tensor& t) { return exp(t); }},
          {"dropout", [](const Tensor& t) { return dropout(t, 0.5, true); }},
          {"gelu", [](const Tensor& t) { return gelu(t); }},
          {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.1); }},
          {"clamp", [](const Tensor& t) { return clamp(t, 0.6, 1.2); }}};
}
}  // namespace

TEST_CASE("unary ops and activations keep channels-last, in values and gradients, as PyTorch") {
  const std::vector<double> want = answer("unary/answer");
  const auto ops = unary_ops();
  REQUIRE(want.size() == 2 * ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    INFO(ops[i].first);
    const Tensor x = leaf({2, 3, 6, 6}, 'c', 6), xr = x.detach().contiguous().requires_grad_();
    const Tensor out = ops[i].second(x);
    CHECK(formats(out) == std::vector<double>{want[2 * i], want[2 * i + 1]});
    if (std::string(ops[i].first) == "dropout") continue;  // the mask is drawn in memory order: checked below
    const Tensor out_r = ops[i].second(xr);
    CHECK(identical(out, out_r));
    const Tensor w = rand({2, 3, 6, 6}, default_generator(), f64());
    mul(out, w).sum().backward();
    mul(out_r, w).sum().backward();
    CHECK(formats(x.grad()) == std::vector<double>{0.0, 1.0});
    CHECK(identical(x.grad(), xr.grad()));
  }
}

TEST_CASE("dropout of a channels-last tensor keeps the format and its gradient uses the same mask") {
  const Tensor x = leaf({2, 4, 5, 5}, 'c', 7);
  const Tensor out = dropout(x, 0.5, true);
  CHECK(formats(out) == std::vector<double>{0.0, 1.0});
  out.sum().backward();
  const std::vector<double> xv = x.to_vector(), ov = out.to_vector(), gv = x.grad().to_vector();
  int kept = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const bool keep = ov[i] != 0.0;
    kept += keep;
    CHECK(ov[i] == (keep ? xv[i] * 2.0 : 0.0));
    CHECK(gv[i] == (keep ? 2.0 : 0.0));
  }
  CHECK(kept > 50);
  CHECK(kept < 150);
}

namespace {
struct BinaryCase {
  const char* name;
  Shape x_shape;
  char x_format;
  Shape y_shape;
  char y_format;
};
const std::vector<BinaryCase> binary_cases = {
    {"cl_cl", {2, 3, 4, 5}, 'c', {2, 3, 4, 5}, 'c'},     {"cl_rm", {2, 3, 4, 5}, 'c', {2, 3, 4, 5}, 'r'},
    {"rm_cl", {2, 3, 4, 5}, 'r', {2, 3, 4, 5}, 'c'},     {"cl_bias", {2, 3, 4, 5}, 'c', {1, 3, 1, 1}, 'r'},
    {"bias_cl", {1, 3, 1, 1}, 'r', {2, 3, 4, 5}, 'c'},   {"cl_c", {2, 3, 4, 5}, 'c', {3, 1, 1}, 'r'},
    {"cl_w", {2, 3, 4, 5}, 'c', {5}, 'r'},               {"rm_scalar0d", {2, 3, 4, 5}, 'c', {}, 'r'},
    {"cl_cl_bcastN", {2, 3, 4, 5}, 'c', {1, 3, 4, 5}, 'c'}, {"rm_bcastN_cl", {1, 3, 4, 5}, 'r', {2, 3, 4, 5}, 'c'},
};
}  // namespace

TEST_CASE("binary ops give the output format PyTorch's TensorIterator gives, and leaves' grads keep their format") {
  for (const BinaryCase& c : binary_cases)
    for (const auto& [op_name, op] : binary_ops) {
      INFO(c.name << " " << op_name);
      const Tensor x = leaf(c.x_shape, c.x_format, 1), y = leaf(c.y_shape, c.y_format, 2);
      const Tensor xr = x.detach().contiguous().requires_grad_(), yr = y.detach().contiguous().requires_grad_();
      const Tensor out = op(x, y), out_r = op(xr, yr);
      const Tensor w = rand(out.shape(), default_generator(), f64());
      mul(out, w).sum().backward();
      mul(out_r, w).sum().backward();
      std::vector<double> got = formats(out);
      append(got, formats(x.grad()));
      append(got, formats(y.grad()));
      CHECK(got == answer(fmt::format("binary/{}/{}/answer", c.name, op_name)));
      CHECK(identical(out, out_r));
      CHECK(allclose(x.grad(), xr.grad(), 1e-14, 0));
      CHECK(allclose(y.grad(), yr.grad(), 1e-14, 0));
    }
}

TEST_CASE("a channels-last leaf's .grad is channels-last whatever formats its gradients arrive in, and sums them") {
  for (const char* name : {"param_cl_only", "param_mixed", "param_rm_only"}) {
    INFO(name);
    const std::string key = name;
    const std::string uses = key == "param_cl_only" ? "c" : key == "param_mixed" ? "cr" : "r";
    const Tensor w = leaf({2, 3, 4, 5}, 'c', 5);
    Tensor loss = zeros({}, f64());
    for (char u : uses) loss = add(loss, u == 'c' ? mul(w, 2.0).sum() : mul(w.contiguous(), 3.0).sum());
    loss.backward();
    std::vector<double> got = formats(w.grad());
    const double first = uses == "c" ? 2.0 : uses == "r" ? 3.0 : 5.0;
    CHECK(identical(w.grad(), full({2, 3, 4, 5}, first, f64())));
    mul(w, w).sum().backward();
    append(got, formats(w.grad()));
    CHECK(got == answer(fmt::format("grad/{}/answer", name)));
    CHECK(allclose(w.grad(), add(mul(w.detach(), 2.0), first)));
  }
}

TEST_CASE("gradients of a channels-last intermediate used twice, in both formats, add up") {
  const Tensor x = leaf({2, 3, 3, 4}, 'r', 8);
  const Tensor h = relu(x.contiguous(CL));  // channels-last intermediate
  const Tensor y = add(mul(h, h), mul(h.contiguous(), 3.0));  // one channels-last use, one row-major
  y.sum().backward();
  const Tensor xd = x.detach();
  CHECK(formats(x.grad()) == std::vector<double>{1.0, 0.0});
  CHECK(allclose(x.grad(), add(mul(relu(xd), 2.0), mul(gt(xd, 0.0), 3.0))));
}

TEST_CASE("in-place ops write a channels-last tensor where it lies and keep its format") {
  const Tensor other = leaf({2, 3, 4, 5}, 'r', 4).detach();
  Tensor x = leaf({2, 3, 4, 5}, 'c', 3).detach();
  const Tensor before = x.contiguous();
  x.add_(other);
  CHECK(formats(x) == answer("inplace/cl_add_rm/answer"));
  CHECK(identical(x, add(before, other)));
  x.mul_(ones({1, 3, 1, 1}, f64()).mul_(0.5));
  x.relu_();
  x.copy_(mul(x, 2.0).contiguous());
  CHECK(x.is_contiguous(CL));
  CHECK(identical(x, add(before, other)));
}

// ---- properties: the same values and gradients in both formats ----

namespace {
// x in both formats as float64 leaves; `check(out_cl, out_rm)` compares; the gradients of sum(out * w) too.
void check_both_formats(const Tensor& values, const std::function<Tensor(const Tensor&)>& f, bool bit_identical) {
  const Tensor x = values.contiguous(CL).detach().requires_grad_();
  const Tensor xr = values.detach().contiguous().requires_grad_();
  const Tensor out = f(x), out_r = f(xr);
  if (bit_identical)
    TAPEGRAD_RC_IDENTICAL(out, out_r);
  else
    TAPEGRAD_RC_ALLCLOSE(out, out_r, 1e-12, 1e-14);
  const Tensor w = values.numel() ? add(mul(out_r.detach(), 0.5), 1.0) : out_r.detach();
  mul(out, w).sum().backward();
  mul(out_r, w).sum().backward();
  RC_ASSERT(x.grad().is_contiguous(CL));
  TAPEGRAD_RC_ALLCLOSE(x.grad(), xr.grad(), 1e-12, 1e-14);
}
rc::Gen<Tensor> image4d() {
  return rc::gen::mapcat(gen::shape(4, 4, 1, 4), [](const Shape& s) { return gen::tensor_of_shape(s); });
}
}  // namespace

TEST_CASE("unary ops give the same values and gradients on channels-last and row-major copies") {
  rc::prop("random 4-d inputs", [] {
    const Tensor v = *image4d();
    for (const auto& [name, op] : unary_ops()) {
      if (std::string(name) == "dropout") continue;
      check_both_formats(v, op, true);
    }
  });
}

TEST_CASE("binary ops with broadcasting give the same values and gradients in every mix of formats") {
  rc::prop("random 4-d pairs, either side channels-last", [] {
    const Shape full_shape = *gen::shape(4, 4, 1, 4);
    Shape other = full_shape;
    for (auto& e : other)
      if (*rc::gen::arbitrary<bool>()) e = 1;
    const int drop = *rc::gen::inRange(0, 5);
    other.erase(other.begin(), other.begin() + drop);
    const Tensor a = *gen::tensor_of_shape(full_shape, 0.5, 2.0), b = *gen::tensor_of_shape(other, 0.5, 2.0);
    const bool swap = *rc::gen::arbitrary<bool>();
    const bool b_cl = b.dim() == 4 && *rc::gen::arbitrary<bool>();
    const Tensor bb = b_cl ? b.contiguous(CL) : b;
    for (const auto& [name, op] : binary_ops) {
      check_both_formats(a, [&, op = op](const Tensor& x) { return swap ? op(bb, x) : op(x, bb); }, true);
    }
  });
}

// ---- pooling: NHWC kernels ----

namespace {
const std::vector<std::pair<const char*, Unary>> pool_ops = {
    {"max_pool2d 2", [](const Tensor& t) { return max_pool2d(t, 2); }},
    {"max_pool2d 3/2/1", [](const Tensor& t) { return max_pool2d(t, 3, IntPair(2), 1); }},
    {"avg_pool2d 2", [](const Tensor& t) { return avg_pool2d(t, 2); }},
    {"avg_pool2d 3/2/1", [](const Tensor& t) { return avg_pool2d(t, 3, IntPair(2), 1); }},
    {"adaptive_avg_pool2d 1", [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
    {"adaptive_avg_pool2d 4x3", [](const Tensor& t) { return adaptive_avg_pool2d(t, IntPair(4, 3)); }},
};
}  // namespace

TEST_CASE("pools keep channels-last as PyTorch, with the values and gradients of the NCHW kernels") {
  const std::vector<double> want = answer("pool/answer");
  REQUIRE(want.size() == 4 * pool_ops.size());
  for (std::size_t i = 0; i < pool_ops.size(); ++i) {
    INFO(pool_ops[i].first);
    for (DType dtype : {DType::Float32, DType::Float64}) {
      const Tensor values = leaf({2, 3, 6, 6}, 'r', 6).detach().to(dtype);
      const Tensor x = values.contiguous(CL).requires_grad_(), xr = values.detach().requires_grad_();
      const Tensor out = pool_ops[i].second(x), out_r = pool_ops[i].second(xr);
      const Tensor w = rand(out.shape(), default_generator(), TensorOptions{}.with_dtype(dtype));
      mul(out, w).sum().backward();
      mul(out_r, w).sum().backward();
      std::vector<double> got = formats(out);
      append(got, formats(x.grad()));
      CHECK(got == std::vector<double>(want.begin() + 4 * i, want.begin() + 4 * i + 4));
      CHECK(identical(out, out_r));
      CHECK(identical(x.grad(), xr.grad()));
    }
  }
}

TEST_CASE("max_pool2d_with_indices of a channels-last input gives PyTorch's indices, and NaN wins as in NCHW") {
  Tensor values = leaf({2, 5, 7, 6}, 'r', 9).detach();
  values.index_put_({0, 1, 2, 3}, NAN);
  values.index_put_({1, 4, 0, 0}, NAN);
  values.index_put_({1, 4, 0, 1}, NAN);
  for (IntPair kernel : {IntPair(2), IntPair(3, 2)}) {
    const auto [out, indices] = max_pool2d_with_indices(values.contiguous(CL), kernel, std::nullopt, 1);
    const auto [out_r, indices_r] = max_pool2d_with_indices(values, kernel, std::nullopt, 1);
    CHECK(out.is_contiguous(CL));
    CHECK(indices.is_contiguous(CL));
    CHECK(identical(out, out_r));
    CHECK(identical(indices, indices_r));
  }
}

TEST_CASE("pools of channels-last inputs match the NCHW ones for random geometries, and gradcheck in float64") {
  rc::prop("random pools", [] {
    const Shape shape{*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(2, 5),
                      *rc::gen::inRange<std::int64_t>(3, 6), *rc::gen::inRange<std::int64_t>(3, 6)};
    // Distinct values at least 0.01 apart (a shuffled ramp), so no window holds a near-tie that finite
    // differences would straddle.
    std::vector<double> ramp(static_cast<std::size_t>(shape_numel(shape)));
    for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = 0.01 * static_cast<double>(i) - 1.0;
    std::shuffle(ramp.begin(), ramp.end(), std::mt19937(*rc::gen::arbitrary<std::uint32_t>()));
    const Tensor v = from_vector(ramp, shape, f64());
    const IntPair kernel(*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4));
    const IntPair stride(*rc::gen::inRange<std::int64_t>(1, 3), *rc::gen::inRange<std::int64_t>(1, 3));
    const IntPair padding(*rc::gen::inRange<std::int64_t>(0, kernel.h / 2 + 1),
                          *rc::gen::inRange<std::int64_t>(0, kernel.w / 2 + 1));
    const bool ceil_mode = *rc::gen::arbitrary<bool>();
    const IntPair out_size(*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4));
    const int which = *rc::gen::inRange(0, 3);
    const Unary pool = [=](const Tensor& t) {
      if (which == 0) return max_pool2d(t, kernel, stride, padding, 1, ceil_mode);
      if (which == 1) return avg_pool2d(t, kernel, stride, padding, ceil_mode, ceil_mode);
      return adaptive_avg_pool2d(t, out_size);
    };
    check_both_formats(v, pool, true);
    // The NHWC kernels' own derivatives, and the derivatives of those (scatter and gather).
    const auto f = [pool](const std::vector<Tensor>& in) {
      const Tensor y = pool(in[0].contiguous(CL));
      RC_ASSERT(y.is_contiguous(CL));
      return mul(y, y);
    };
    TAPEGRAD_RC_GRADCHECK(f, std::vector<Tensor>{v});
    TAPEGRAD_RC_GRADGRADCHECK(f, std::vector<Tensor>{v});
  });
}

// ---- saving and loading ----

namespace {
struct Holder : nn::Module {
  Tensor weight;
  explicit Holder(const Tensor& w) : nn::Module("Holder") { weight = register_parameter("weight", w); }
};
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tapegrad_channels_last_" + std::to_string(::getpid()) + "_" + name))
      .string();
}
}  // namespace

TEST_CASE("a channels-last parameter saves its values in row-major order and loads into either format") {
  const Tensor values = leaf({3, 4, 2, 5}, 'r', 11).detach();
  Holder saved(values.contiguous(CL));
  REQUIRE(saved.weight.is_contiguous(CL));
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> writers = {
      {"checkpoint", [&](const std::string& p) { save(saved, p); }},
      {"pt", [&](const std::string& p) { save_pytorch(saved, p); }},
      {"safetensors", [&](const std::string& p) { save_safetensors(saved, p); }}};
  for (const auto& [kind, write] : writers) {
    INFO(kind);
    const std::string path = temp_path(kind);
    write(path);
    for (char format : {'r', 'c'}) {
      Holder loaded(leaf({3, 4, 2, 5}, format, 12));
      if (kind == "checkpoint") load(loaded, path);
      if (kind == "pt") load_pytorch(loaded, path);
      if (kind == "safetensors") load_safetensors(loaded, path);
      CHECK(identical(loaded.weight, values));
    }
    std::filesystem::remove(path);
  }
}
