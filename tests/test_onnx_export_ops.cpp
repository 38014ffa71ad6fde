// ONNX export of the normalisation layers, every activation, Embedding, and the functional ops a custom forward
// uses (elementwise with broadcasting and scalars, reshape/view/permute/transpose/cat/stack/slices/index with
// constants, reductions): checker, strict shape inference, and ONNX Runtime against tapegrad (1e-5 relative).
#include "support/onnx_export_check.h"

using namespace tapegrad;
using tapegrad::testing::check_export;
using tapegrad::testing::dims_of;
using tapegrad::testing::Lambda;
using tapegrad::testing::randomize_statistics;

namespace {

Tensor input_of(const Shape& shape, std::uint64_t seed = 1) {
  Generator generator(seed);
  return randn(shape, generator);
}

}  // namespace

TEST_CASE("LayerNorm exports as its formula before opset 17 and as LayerNormalization from 17") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::LayerNorm norm(Shape{4, 5});
  randomize_statistics(norm);
  const auto s13 = check_export(norm, input_of({3, 4, 5}), dims_of({3, 4, 5}));
  CHECK(s13.count("LayerNormalization") == 0);
  CHECK(s13.count("ReduceMean") == 2);
  tapegrad::onnx::ExportOptions opset17;
  opset17.opset = 17;
  const auto s17 = check_export(norm, input_of({3, 4, 5}), dims_of({3, 4, 5}), opset17);
  CHECK(s17.count("LayerNormalization") == 1);
  CHECK(s17.opset == 17);
  nn::LayerNorm bare(nn::LayerNormOptions{{6}}.with_elementwise_affine(false));
  check_export(bare, input_of({2, 6}), dims_of({2, 6}), opset17);
  check_export(bare, input_of({2, 6}), dims_of({2, 6}));
}

TEST_CASE("GroupNorm and InstanceNorm export, with and without running statistics") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  nn::GroupNorm group(nn::GroupNormOptions{2, 6});
  randomize_statistics(group);
  check_export(group, input_of({3, 6, 4, 4}), dims_of({3, 6, 4, 4}));
  nn::InstanceNorm2d instance(nn::InstanceNormOptions{3}.with_affine(true));
  randomize_statistics(instance, 2);
  check_export(instance, input_of({2, 3, 5, 4}), dims_of({2, 3, 5, 4}));
  nn::InstanceNorm1d plain(4);
  check_export(plain, input_of({2, 4, 7}), dims_of({2, 4, 7}));
  nn::InstanceNorm2d tracked(nn::InstanceNormOptions{3}.with_track_running_stats(true));
  randomize_statistics(tracked, 3);
  const auto s = check_export(tracked, input_of({2, 3, 4, 4}), dims_of({2, 3, 4, 4}));
  CHECK(s.count("BatchNormalization") == 1);
}

TEST_CASE("every activation layer exports") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  const Tensor x = input_of({3, 7});
  nn::ReLU relu;
  CHECK(check_export(relu, x, dims_of({3, 7})).count("Relu") == 1);
  nn::ReLU relu_inplace(nn::ReLUOptions{}.inplace(true));
  check_export(relu_inplace, x.clone(), dims_of({3, 7}));
  nn::LeakyReLU leaky(0.2);
  CHECK(check_export(leaky, x, dims_of({3, 7})).count("LeakyRelu") == 1);
  nn::LeakyReLU leaky_inplace(0.1, true);
  check_export(leaky_inplace, x.clone(), dims_of({3, 7}));
  nn::GELU gelu;
  CHECK(check_export(gelu, x, dims_of({3, 7})).count("Erf") == 1);
  nn::GELU gelu_tanh("tanh");
  CHECK(check_export(gelu_tanh, x, dims_of({3, 7})).count("Tanh") == 1);
  nn::Sigmoid sigmoid;
  check_export(sigmoid, x, dims_of({3, 7}));
  nn::Tanh tanh_layer;
  check_export(tanh_layer, x, dims_of({3, 7}));
  nn::Softmax softmax_layer(1);
  CHECK(check_export(softmax_layer, x, dims_of({3, 7})).count("Softmax") == 1);
  nn::LogSoftmax log_softmax_layer(-1);
  CHECK(check_export(log_softmax_layer, x, dims_of({3, 7})).count("LogSoftmax") == 1);
  Lambda softplus_fn([](const Tensor& t) { return add(softplus(t), softplus(t, 2.0)); });
  check_export(softplus_fn, x, dims_of({3, 7}));
}

TEST_CASE("Embedding exports as Gather over int64 indices") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(4);
  nn::Embedding embedding(nn::EmbeddingOptions{10, 3});
  const Tensor indices = from_vector(std::vector<std::int64_t>{1, 4, 9, 0, 4, 2}, {2, 3});
  const auto s = check_export(embedding, indices, dims_of({2, 3, 3}));
  CHECK(s.count("Gather") == 1);
  CHECK(s.has_initializer("weight"));
}

TEST_CASE("elementwise ops export with broadcasting, scalars, constants and in-place updates") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(5);
  const Tensor bias = randn({4});  // made outside the forward: a constant of the graph
  Lambda f([bias](const Tensor& x) {
    Tensor y = add(mul(x, 2.5), bias);        // scalar, broadcast constant
    y = sub(y, div(x, add(abs(x), 1.0)));     // tensor ops
    y = add(y, rsub(exp(mul(x, 0.1)), 3.0));  // scalar on the left
    y = add(y, pow(sqrt(add(square(x), 1.0)), 1.5));
    y = add(y, clamp(x, -0.5, 0.5));
    y = add(y, rdiv(add(abs(x), 1.0), 2.0));
    y = mul(y, sigmoid(neg(x)));
    Tensor z = y.clone();
    z += x;  // in place: add_
    z *= tanh(x);
    return add(z, log(add(abs(x), 1.0)));
  });
  check_export(f, input_of({3, 4}), dims_of({3, 4}));
}

TEST_CASE("layout ops export: reshape, view, permute, transpose, cat, stack, slices, select, index_select") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  const Tensor index = from_vector(std::vector<std::int64_t>{2, 0, 1}, {3});
  Lambda f([index](const Tensor& x) {                                // x: [2, 3, 4]
    Tensor a = permute(x, {0, 2, 1});                                // [2, 4, 3]
    Tensor b = transpose(a, 1, 2).reshape({2, 12}).view({2, 3, 4});  // [2, 3, 4]
    Tensor c = cat({b, x}, 1);                                       // [2, 6, 4]
    Tensor d = slice(c, 1, 1, 5, 2);                                 // [2, 2, 4]
    Tensor e = add(d, select(x, 1, 2).unsqueeze(1));                 // [2, 2, 4]
    Tensor g = index_select(x, 1, index);                            // [2, 3, 4]
    Tensor h = stack({e, narrow(g, 1, 0, 2)}, 0);                    // [2, 2, 2, 4]
    Tensor i = add(sum(h, {0}), mean(x.index({indexing::Slice(), indexing::Slice(0, 2)}), {2}, true));
    return flatten(squeeze(unsqueeze(i, 0), 0), 1);  // [2, 8]
  });
  check_export(f, input_of({2, 3, 4}), dims_of({2, 8}));
}

TEST_CASE("matmul, where and masked_fill export; a scalar sum becomes a 0-d output") {
  tapegrad::testing::OnnxRuntimeBatch onnx_runtime;  // runs this case's models in one ONNX Runtime process
  manual_seed(6);
  const Tensor w = randn({4, 5});
  Lambda f([w](const Tensor& x) {
    Tensor y = matmul(x, w);  // [3, 5]
    y = where(gt(y, 0.0), y, mul(y, 0.1));
    return masked_fill(y, lt(y, -0.2), 7.0);
  });
  check_export(f, input_of({3, 4}), dims_of({3, 5}));
  Lambda total([](const Tensor& x) { return sum(x); });
  check_export(total, input_of({3, 4}), {});
}
