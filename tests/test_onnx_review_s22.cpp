// Review (session 22) of the ONNX export: layers with unusual attributes, each exported, checked by ONNX's checker
// and shape inference, and run by ONNX Runtime against tapegrad's eval output (which agrees with PyTorch 1.13 on
// these inputs: the values below are torch's, printed by the script in each case's comment).
#include "support/error_of.h"
#include "support/onnx_export_check.h"

using namespace tapegrad;
using tapegrad::testing::check_export;
using tapegrad::testing::dims_of;
using tapegrad::testing::Lambda;
using tapegrad::testing::error_of;

namespace {

// ((i * 7) % 11 - 5) * 0.5 over an n x n plane: exact in float32, with ties and signs.
Tensor plane(std::int64_t n) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < n * n; ++i) v.push_back(static_cast<float>((i * 7) % 11 - 5) * 0.5f);
  return from_vector(v, Shape{1, 1, n, n});
}

void check_values(const Tensor& y, const std::vector<double>& expected) {
  const std::vector<double> got = y.contiguous().to_vector();
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-6));
}

}  // namespace

// import torch; F = torch.nn.functional
// def plane(n): return (((torch.arange(n*n)*7) % 11) - 5.0).float().reshape(1,1,n,n) * 0.5
TEST_CASE("pools whose last ceil_mode window starts in the padding export with PyTorch's windows") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;
  SECTION("AvgPool2d, count_include_pad, a last window running past the padded edge") {
    nn::AvgPool2d pool(
        nn::AvgPool2dOptions{3}.with_stride(2).with_padding(1).with_ceil_mode(true).with_count_include_pad(true));
    // F.avg_pool2d(plane(6), 3, 2, 1, ceil_mode=True, count_include_pad=True).flatten().tolist()
    check_values(pool.forward(plane(6)), {0.0555555559694767, 0.2222222238779068, 0.0, -0.6666666865348816, 0.0,
                                          0.0555555559694767, -0.2777777910232544, 0.0833333358168602,
                                          -0.1111111119389534, -0.1111111119389534, -0.4444444477558136, 0.0,
                                          -0.0833333358168602, -0.25, -0.4166666567325592, -0.25});
    check_export(pool, plane(6), dims_of({1, 1, 4, 4}));
  }
  SECTION("AvgPool2d without count_include_pad") {
    nn::AvgPool2d pool(
        nn::AvgPool2dOptions{3}.with_stride(2).with_padding(1).with_ceil_mode(true).with_count_include_pad(false));
    check_export(pool, plane(6), dims_of({1, 1, 4, 4}));
  }
  SECTION("MaxPool2d: PyTorch drops a window that would start in the right padding") {
    nn::MaxPool2d pool(nn::MaxPool2dOptions{2}.with_stride(2).with_padding(1).with_ceil_mode(true));
    // F.max_pool2d(plane(5), 2, 2, 1, ceil_mode=True).flatten().tolist()
    check_values(pool.forward(plane(5)), {-2.5, 1.0, 2.5, -0.5, 2.0, 2.5, 1.5, 2.0, 1.0});
    check_export(pool, plane(5), dims_of({1, 1, 3, 3}));
  }
  SECTION("AvgPool2d likewise") {
    nn::AvgPool2d pool(nn::AvgPool2dOptions{2}.with_stride(2).with_padding(1).with_ceil_mode(true));
    // F.avg_pool2d(plane(5), 2, 2, 1, ceil_mode=True).flatten().tolist()
    check_values(pool.forward(plane(5)), {-0.625, 0.0, 0.75, -0.5, 0.125, 0.25, 0.5, -0.625, -0.5});
    check_export(pool, plane(5), dims_of({1, 1, 3, 3}));
  }
  SECTION("dilated MaxPool2d, and a dynamic batch") {
    nn::MaxPool2d pool(nn::MaxPool2dOptions{2}.with_stride(3).with_padding(1).with_dilation(2).with_ceil_mode(true));
    // F.max_pool2d(plane(5), 2, 3, 1, dilation=2, ceil_mode=True).flatten().tolist()
    check_values(pool.forward(plane(5)), {2.0, 1.5, -0.5, 2.5});
    tapegrad::onnx::ExportOptions options;
    options.dynamic_axes = {{"input", {0}}, {"output", {0}}};
    check_export(pool, plane(5), std::vector<std::string>{"*", "1", "2", "2"}, options, {cat({plane(5), plane(5), plane(5)}, 0)});
  }
}

TEST_CASE("a ceil_mode pool that would need the slice on a dynamic spatial axis is refused, naming the op") {
  // The slice's end is the example's extent; on a dynamic axis it would be wrong for every other size.
  nn::MaxPool2d pool(nn::MaxPool2dOptions{2}.with_stride(2).with_padding(1).with_ceil_mode(true));
  tapegrad::onnx::ExportOptions options;
  options.dynamic_axes = {{"input", {3}}};
  const std::string error =
      error_of([&] { tapegrad::onnx::export_onnx(pool, {plane(5)}, tapegrad::testing::onnx_temp_path("ceil"), options); });
  CHECK_THAT(error, Catch::Contains("export_onnx: op 'max_pool2d'") &&
                        Catch::Contains("ceil_mode output extent 3 (ONNX's formula gives 4)") &&
                        Catch::Contains("dynamic"));
}

namespace {

Tensor normal_input(const Shape& shape) {
  Generator generator(5);
  return randn(shape, generator);
}

}  // namespace

TEST_CASE("reductions, softmax and layout ops with negative axes, keepdim and broadcasting match ONNX Runtime") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;
  const std::vector<std::function<Tensor(const Tensor&)>> cases{
      [](const Tensor& x) { return sum(x, {-1}, true); },
      [](const Tensor& x) { return sum(x, {0, 2}); },
      [](const Tensor& x) { return mean(x, {-2}); },
      [](const Tensor& x) { return mean(x, {-1}, true); },
      [](const Tensor& x) { return softmax(x, 1); },
      [](const Tensor& x) { return log_softmax(x, -2); },
      [](const Tensor& x) { return softmax(x, 0); },
      [](const Tensor& x) { return transpose(x, -1, -3).contiguous(); },
      [](const Tensor& x) { return unsqueeze(x, -1); },
      [](const Tensor& x) { return select(x, -1, -1); },
      [](const Tensor& x) { return select(x, 1, -2); },
      [](const Tensor& x) { return flatten(x, 0, -2); },
      [](const Tensor& x) { return squeeze(sum(x, {1}, true), 1); },
      [](const Tensor& x) { return add(x, sum(x, {0}, true)); },
      [](const Tensor& x) { return clamp(x, -0.5, std::numeric_limits<double>::infinity()); },
      [](const Tensor& x) { return rsub(x, 2.0); },
      [](const Tensor& x) { return cat({x, mul(x, 2.0)}, -1); },
      [](const Tensor& x) { return stack({x, mul(x, 2.0)}, -1); },
  };
  for (const auto& f : cases) {
    Lambda m(f);
    check_export(m, normal_input({2, 3, 4}), dims_of(m.forward(normal_input({2, 3, 4})).shape()));
  }
}

TEST_CASE("a tensor an untraced op computes from the input is refused, not frozen into the file as a constant") {
  // argmax records nothing (it has no gradient): its result used to become an initializer holding the example's
  // indices, so ONNX Runtime returned them for every input.
  const std::string path = tapegrad::testing::onnx_temp_path("argmax");
  Lambda as_float([](const Tensor& x) { return argmax(x, -1).to(DType::Float32); });
  const std::string message = error_of([&] {
    tapegrad::onnx::export_onnx(as_float, {normal_input({2, 3, 4})}, path);
  });
  CHECK_THAT(message, Catch::Contains("op 'to' reads a tensor of shape [2, 3]") && Catch::Contains("argmax"));
  Lambda direct([](const Tensor& x) { return argmax(x, 1); });
  CHECK_THAT(error_of([&] { tapegrad::onnx::export_onnx(direct, {normal_input({2, 3, 4})}, path); }),
             Catch::Contains("the forward's output") && Catch::Contains("argmax"));
  // sign and count_nonzero record nothing either (no gradient to record); both were frozen the same way.
  Lambda sign_of([](const Tensor& x) { return sign(x); });
  CHECK_THAT(error_of([&] { tapegrad::onnx::export_onnx(sign_of, {normal_input({2, 3, 4})}, path); }),
             Catch::Contains("values change with the input's"));
  Lambda nonzero_count([](const Tensor& x) { return count_nonzero(gt(x, 0.0)).to(DType::Float32); });
  CHECK_THAT(error_of([&] { tapegrad::onnx::export_onnx(nonzero_count, {normal_input({2, 3, 4})}, path); }),
             Catch::Contains("op 'to' reads a tensor of shape []"));
  CHECK_FALSE(std::filesystem::exists(path));
  // A constant made from no input is still exported (the same in the rerun on other values).
  Lambda offset([](const Tensor& x) { return add(x, arange(0, 4).to(DType::Float32)); });
  check_export(offset, normal_input({2, 3, 4}), dims_of({2, 3, 4}));
}

TEST_CASE("an attention keep-mask given as a graph input is read from the input, not frozen at the example's") {
  // scaled_dot_product_attention read the keep-mask through Tensor::detach(), which did not report to the tracer:
  // the export froze the example's mask into the file (now refused by the check above; with detach reported, the
  // mask is an Identity of the input).
  manual_seed(3);
  const Tensor q = randn({2, 4, 8}), k = randn({2, 6, 8}), v = randn({2, 6, 5});
  Tensor keep_a = ones({4, 6}), keep_b = ones({4, 6});
  keep_a.narrow(1, 0, 1).fill_(0.0);
  keep_b.narrow(1, 5, 1).fill_(0.0);
  nn::Sequential none;
  const tapegrad::onnx::ModuleForward forward = [](nn::Module&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], AttentionMask::keep(in[3]))};
  };
  const std::string path = tapegrad::testing::onnx_temp_path("keep_mask");
  tapegrad::onnx::export_onnx(none, forward, {q, k, v, keep_a}, path);
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = forward(none, {q, k, v, keep_b})[0];
  }
  const std::vector<Tensor> got = tapegrad::testing::run_in_onnx_runtime(
      path, {{"input_0", q}, {"input_1", k}, {"input_2", v}, {"input_3", keep_b}});
  std::filesystem::remove(path);
  REQUIRE(got.size() == 1);
  CHECK(tapegrad::testing::compare_outputs(expected, got[0], 1e-5, 1e-6) == "");
}

TEST_CASE("softplus with a small threshold exports PyTorch's switch to the identity") {
  // torch.nn.functional.softplus(torch.tensor([-1.0, 0.5, 1.5, 3.0]), beta=2.0, threshold=1.0).tolist()
  const Tensor x = from_vector(std::vector<float>{-1.0f, 0.5f, 1.5f, 3.0f}, Shape{4});
  check_values(softplus(x, 2.0, 1.0), {0.06346400082111359, 0.65663081407547, 1.5, 3.0});
  // ONNX's Softplus has no threshold: the exported graph gave log1p(exp(2 x)) / 2 everywhere (1.5012 for 1.5).
  Lambda m([](const Tensor& t) { return softplus(t, 2.0, 1.0); });
  check_export(m, x, dims_of({4}));
  Lambda plain([](const Tensor& t) { return softplus(t); });
  check_export(plain, normal_input({3, 5}), dims_of({3, 5}));
}
