// Review (session 22) of the ONNX export: layers with unusual attributes, each exported, checked by ONNX's checker
// and shape inference, and run by ONNX Runtime against tapegrad's eval output (which agrees with PyTorch 1.13 on
// these inputs: the values below are torch's, printed by the script in each case's comment).
#include "support/onnx_export_check.h"

using namespace tapegrad;
using tapegrad::testing::check_export;
using tapegrad::testing::dims_of;

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
