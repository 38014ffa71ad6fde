// ONNX export, one layer at a time (linear, convolutions, pools, BatchNorm, flatten, dropout): each exports,
// passes ONNX's checker and strict shape inference with the expected output shape, and ONNX Runtime's output
// matches tapegrad's (float32, 1e-5 relative).
#include "support/onnx_export_check.h"

using namespace tapegrad;
using tapegrad::testing::check_export;
using tapegrad::testing::dims_of;
using tapegrad::testing::randomize_statistics;

namespace {

Tensor input_of(const Shape& shape, std::uint64_t seed = 1) {
  Generator generator(seed);
  return randn(shape, generator);
}

}  // namespace

TEST_CASE("Linear exports as Gemm on [N, in] and as MatMul on [N, T, in]") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(0);
  nn::Linear fc(nn::LinearOptions{6, 4});
  const auto s = check_export(fc, input_of({3, 6}), dims_of({3, 4}));
  CHECK(s.count("Gemm") == 1);
  CHECK(s.has_initializer("weight"));
  CHECK(s.has_initializer("bias"));
  nn::Linear no_bias(nn::LinearOptions{6, 4}.with_bias(false));
  const auto t = check_export(no_bias, input_of({2, 5, 6}), dims_of({2, 5, 4}));
  CHECK(t.count("MatMul") == 1);
  CHECK_FALSE(t.has_initializer("bias"));
}

TEST_CASE("Conv2d exports stride, padding, dilation and groups") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(1);
  nn::Conv2d conv(
      nn::Conv2dOptions{4, 6, {3, 2}}.with_stride({2, 1}).with_padding({1, 2}).with_dilation({1, 2}).with_groups(2));
  const auto s = check_export(conv, input_of({2, 4, 9, 8}), dims_of({2, 6, 5, 10}));
  CHECK(s.count("Conv") == 1);
  nn::Conv2d plain(nn::Conv2dOptions{3, 5, 3}.with_bias(false));
  check_export(plain, input_of({1, 3, 7, 7}), dims_of({1, 5, 5, 5}));
}

TEST_CASE("ConvTranspose2d exports stride, padding, output_padding, dilation and groups") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(2);
  nn::ConvTranspose2d up(
      nn::ConvTranspose2dOptions{4, 6, 3}.with_stride(2).with_padding(1).with_output_padding(1).with_groups(2));
  const auto s = check_export(up, input_of({2, 4, 5, 5}), dims_of({2, 6, 10, 10}));
  CHECK(s.count("ConvTranspose") == 1);
  nn::ConvTranspose2d dilated(nn::ConvTranspose2dOptions{3, 2, {2, 3}}.with_dilation({2, 1}).with_bias(false));
  check_export(dilated, input_of({1, 3, 4, 6}), dims_of({1, 2, 6, 8}));
}

TEST_CASE("pools export as MaxPool, AveragePool and GlobalAveragePool") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::MaxPool2d max_pool(nn::MaxPool2dOptions{3}.with_stride(2).with_padding(1));
  CHECK(check_export(max_pool, input_of({2, 3, 9, 9}), dims_of({2, 3, 5, 5})).count("MaxPool") == 1);
  nn::MaxPool2d two(nn::MaxPool2dOptions{2});
  check_export(two, input_of({2, 3, 8, 8}), dims_of({2, 3, 4, 4}));
  nn::MaxPool2d dilated(nn::MaxPool2dOptions{2}.with_dilation(2).with_ceil_mode(true));
  check_export(dilated, input_of({1, 2, 9, 9}), dims_of({1, 2, 4, 4}));
  nn::AvgPool2d avg(nn::AvgPool2dOptions{3}.with_stride(2).with_padding(1).with_count_include_pad(false));
  CHECK(check_export(avg, input_of({2, 3, 8, 8}), dims_of({2, 3, 4, 4})).count("AveragePool") == 1);
  nn::AvgPool2d ceil(nn::AvgPool2dOptions{2}.with_ceil_mode(true));
  check_export(ceil, input_of({1, 2, 7, 7}), dims_of({1, 2, 4, 4}));
  nn::AdaptiveAvgPool2d global(nn::AdaptiveAvgPool2dOptions{1});
  CHECK(check_export(global, input_of({2, 3, 5, 7}), dims_of({2, 3, 1, 1})).count("GlobalAveragePool") == 1);
  nn::AdaptiveAvgPool2d even(nn::AdaptiveAvgPool2dOptions{{2, 3}});
  check_export(even, input_of({2, 3, 4, 9}), dims_of({2, 3, 2, 3}));
}

TEST_CASE("BatchNorm1d, 2d and 3d export as BatchNormalization with their running statistics") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::BatchNorm1d bn1(5);
  randomize_statistics(bn1);
  const auto s = check_export(bn1, input_of({4, 5}), dims_of({4, 5}));
  CHECK(s.count("BatchNormalization") == 1);
  CHECK(s.has_initializer("running_mean"));
  CHECK(s.has_initializer("running_var"));
  check_export(bn1, input_of({4, 5, 3}), dims_of({4, 5, 3}));
  nn::BatchNorm2d bn2(3);
  randomize_statistics(bn2, 8);
  check_export(bn2, input_of({2, 3, 4, 5}), dims_of({2, 3, 4, 5}));
  nn::BatchNorm3d bn3(2);
  randomize_statistics(bn3, 9);
  check_export(bn3, input_of({2, 2, 3, 4, 5}), dims_of({2, 2, 3, 4, 5}));
  nn::BatchNorm2d plain(nn::BatchNormOptions{3}.with_affine(false));
  randomize_statistics(plain, 10);
  check_export(plain, input_of({2, 3, 2, 2}), dims_of({2, 3, 2, 2}));
}

TEST_CASE("BatchNorm without running statistics normalises with the batch's, as in tapegrad's eval") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::BatchNorm2d batch_stats(nn::BatchNormOptions{3}.with_track_running_stats(false));
  randomize_statistics(batch_stats, 11);
  const auto s = check_export(batch_stats, input_of({4, 3, 3, 3}), dims_of({4, 3, 3, 3}));
  CHECK(s.count("BatchNormalization") == 0);
}

TEST_CASE("Flatten exports as Reshape, Dropout and Dropout2d as the identity") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::Flatten flatten;
  CHECK(check_export(flatten, input_of({2, 3, 4, 5}), dims_of({2, 60})).count("Reshape") == 1);
  nn::Flatten middle(1, 2);
  check_export(middle, input_of({2, 3, 4, 5}), dims_of({2, 12, 5}));
  nn::Dropout dropout(0.5);
  dropout.train();  // exported in eval mode whatever the layer's mode
  CHECK(check_export(dropout, input_of({3, 4}), dims_of({3, 4})).count("Identity") == 1);
  CHECK(dropout.is_training());
  nn::Dropout2d dropout2d(0.3);
  check_export(dropout2d, input_of({2, 3, 4, 4}), dims_of({2, 3, 4, 4}));
}

TEST_CASE("a Sequential of layers exports its Conv-BN-ReLU-pool chain, and its state names are the initializers'") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(3);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions{1, 4, 3}.with_padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(nn::LinearOptions{4 * 4 * 4, 10}));
  randomize_statistics(net, 12);
  const auto s = check_export(net, input_of({2, 1, 8, 8}), dims_of({2, 10}));
  for (const char* name :
       {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "5.weight", "5.bias"})
    CHECK(s.has_initializer(name));
  CHECK_FALSE(s.has_initializer("1.num_batches_tracked"));  // read by no op
  CHECK(s.count("Relu") == 1);
}
