// The shape ops sequence models need (issue #38): triu/tril, split/chunk/unbind, flip, pad, bmm/baddbmm.
// Values and gradients against PyTorch 1.13, views sharing storage, error messages, and float64 properties
// that gradcheck and gradgradcheck each op over random shapes, dims (negative ones too) and arguments.
#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

#include "support/error_of.h"
#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor iota(const Shape& shape, DType dtype = DType::Float64) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, dtype).reshape(shape);
}
std::vector<Tensor> as_list(std::initializer_list<Tensor> tensors) { return tensors; }
std::vector<double> values(std::initializer_list<double> v) { return v; }

template <class F>
TensorFunction squared(F f) {
  return [f](const std::vector<Tensor>& x) {
    Tensor y = f(x);
    return y * y;
  };
}

std::int64_t gen_dim(std::int64_t ndim) { return *rc::gen::inRange<std::int64_t>(-ndim, ndim); }

// Joins pieces back, each scaled by its position + 1, so that a wrong or swapped piece changes the result.
Tensor rejoin(const std::vector<Tensor>& pieces, std::int64_t dim, bool stacked) {
  std::vector<Tensor> scaled;
  for (std::size_t i = 0; i < pieces.size(); ++i) scaled.push_back(pieces[i] * static_cast<double>(i + 1));
  return stacked ? stack(scaled, dim) : cat(scaled, dim);
}

// ---- PyTorch reference cases (tests/reference/make_sequence_ops_reference.py; same keys, same arguments) ----

using Op = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
struct ReferenceCase {
  const char* key;
  Op op;
};

template <class F>
Op single(F f) {
  return [f](const std::vector<Tensor>& v) { return std::vector<Tensor>{f(v)}; };
}
using V = const std::vector<Tensor>&;

const std::vector<ReferenceCase>& reference_cases() {
  static const std::vector<ReferenceCase> cases = {
      {"triu_0", single([](V v) { return triu(v[0]); })},
      {"triu_1_batched", single([](V v) { return triu(v[0], 1); })},
      {"triu_m2", single([](V v) { return triu(v[0], -2); })},
      {"triu_far", single([](V v) { return triu(v[0], 7); })},
      {"tril_0", single([](V v) { return tril(v[0]); })},
      {"tril_m1_batched", single([](V v) { return tril(v[0], -1); })},
      {"tril_2", single([](V v) { return tril(v[0], 2); })},
      {"tril_far", single([](V v) { return tril(v[0], -9); })},
      {"split_2_dim0", [](V v) { return split(v[0], 2, 0); }},
      {"split_2_dimm1", [](V v) { return split(v[0], 2, -1); }},
      {"split_big", [](V v) { return v[0].split(9, 1); }},
      {"split_sizes", [](V v) { return split(v[0], std::vector<std::int64_t>{1, 0, 3, 2}, 1); }},
      {"split_sizes_m2", [](V v) { return v[0].split(std::vector<std::int64_t>{2, 1}, -2); }},
      {"chunk_3_of_6", [](V v) { return chunk(v[0], 3, 0); }},
      {"chunk_4_of_5", [](V v) { return chunk(v[0], 4, -1); }},
      {"chunk_4_of_6", [](V v) { return v[0].chunk(4, 1); }},
      {"chunk_5_of_3", [](V v) { return chunk(v[0], 5, 0); }},
      {"unbind_0", [](V v) { return unbind(v[0], 0); }},
      {"unbind_m1", [](V v) { return v[0].unbind(-1); }},
      {"flip_0", single([](V v) { return flip(v[0], {0}); })},
      {"flip_m1_0", single([](V v) { return flip(v[0], {-1, 0}); })},
      {"flip_1_2", single([](V v) { return flip(v[0], {1, 2}); })},
      {"flip_none", single([](V v) { return flip(v[0], {}); })},
      {"pad_const_1d", single([](V v) { return pad(v[0], {1, 2}); })},
      {"pad_const_value", single([](V v) { return pad(v[0], {0, 1, 2, 0}, PadMode::Constant, 1.5); })},
      {"pad_const_crop", single([](V v) { return pad(v[0], {-1, 2, 1, -1}); })},
      {"pad_const_4d", single([](V v) { return pad(v[0], {1, 0, 0, 1, 1, 1, -1, 1}, PadMode::Constant, -2.0); })},
      {"pad_const_none", single([](V v) { return pad(v[0], {4, -3}, PadMode::Constant, 3.0); })},
      {"pad_reflect_1d", single([](V v) { return pad(v[0], {2, 1}, PadMode::Reflect); })},
      {"pad_reflect_1d_batched", single([](V v) { return pad(v[0], {3, 2}, PadMode::Reflect); })},
      {"pad_reflect_2d", single([](V v) { return pad(v[0], {1, 2, 2, 1}, PadMode::Reflect); })},
      {"pad_reflect_2d_batched", single([](V v) { return pad(v[0], {2, 0, 1, 1}, PadMode::Reflect); })},
      {"pad_reflect_3d", single([](V v) { return pad(v[0], {1, 1, 0, 1, 1, 0}, PadMode::Reflect); })},
      {"pad_reflect_3d_batched", single([](V v) { return pad(v[0], {1, 0, 1, 1, 0, 1}, PadMode::Reflect); })},
      {"pad_reflect_negative", single([](V v) { return pad(v[0], {-1, 2}, PadMode::Reflect); })},
      {"pad_reflect_negative_far", single([](V v) { return pad(v[0], {-3, 1}, PadMode::Reflect); })},
      {"pad_replicate_1d", single([](V v) { return pad(v[0], {3, 1}, PadMode::Replicate); })},
      {"pad_replicate_2d", single([](V v) { return pad(v[0], {2, 1, 0, 3}, PadMode::Replicate); })},
      {"pad_replicate_3d", single([](V v) { return pad(v[0], {1, 2, 1, 0, 2, 1}, PadMode::Replicate); })},
      {"pad_replicate_negative", single([](V v) { return pad(v[0], {-1, 4, 2, -1}, PadMode::Replicate); })},
      {"bmm", single([](V v) { return bmm(v[0], v[1]); })},
      {"bmm_empty_k", single([](V v) { return bmm(v[0], v[1]); })},
      {"baddbmm", single([](V v) { return baddbmm(v[0], v[1], v[2]); })},
      {"baddbmm_scaled_broadcast", single([](V v) { return baddbmm(v[0], v[1], v[2], 0.5, -2.0); })},
      {"baddbmm_vector", single([](V v) { return baddbmm(v[0], v[1], v[2], 2.0, 0.25); })},
  };
  return cases;
}

}  // namespace

// ---- against PyTorch ----

TEST_CASE("sequence shape ops match PyTorch 1.13's values and gradients") {
  const auto ref = tapegrad::testing::load_reference_file("sequence_ops_reference.txt");
  using tapegrad::testing::reference_entry;
  for (const auto& c : reference_cases()) {
    const std::string key = c.key;
    INFO(key);
    std::vector<Tensor> inputs;
    for (int i = 0; ref.count(key + "/in" + std::to_string(i)) > 0; ++i)
      inputs.push_back(reference_entry(ref, key + "/in" + std::to_string(i)).clone().requires_grad_());
    REQUIRE(!inputs.empty());
    const std::vector<Tensor> outs = c.op(inputs);
    const bool is_list = ref.count(key + "/count") > 0;
    REQUIRE(static_cast<double>(outs.size()) == (is_list ? reference_entry(ref, key + "/count").item() : 1.0));
    std::vector<Tensor> grad_outs;
    for (std::size_t j = 0; j < outs.size(); ++j) {
      const std::string suffix = is_list ? std::to_string(j) : "";
      CHECK(allclose(outs[j], reference_entry(ref, key + "/out" + suffix)));
      grad_outs.push_back(reference_entry(ref, key + "/grad_out" + suffix));
    }
    const std::vector<Tensor> grads = autograd::grad(outs, inputs, grad_outs, false, false, true);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      CHECK(allclose(grads[i], reference_entry(ref, key + "/grad_in" + std::to_string(i))));
  }
}

// ---- closed forms ----

TEST_CASE("triu and tril keep one triangle of every matrix, int64 included") {
  const Tensor x = iota({2, 3}, DType::Int64);
  CHECK(triu(x).dtype() == DType::Int64);
  CHECK(triu(x).to_vector() == values({0, 1, 2, 0, 4, 5}));
  CHECK(triu(x, 1).to_vector() == values({0, 1, 2, 0, 0, 5}));
  CHECK(triu(x, -1).to_vector() == x.to_vector());
  CHECK(tril(x).to_vector() == values({0, 0, 0, 3, 4, 0}));
  CHECK(tril(x, -1).to_vector() == values({0, 0, 0, 3, 0, 0}));
  CHECK(tril(x, 5).to_vector() == x.to_vector());
  CHECK(tril(iota({2, 2, 2})).to_vector() == values({0, 0, 2, 3, 4, 0, 6, 7}));
  // A transposed (non-contiguous) input is read through its strides.
  CHECK(triu(transpose(iota({3, 2}), 0, 1)).to_vector() == values({0, 2, 4, 0, 3, 5}));
  CHECK(triu(zeros({0, 3}, f64())).shape() == Shape{0, 3});
}

TEST_CASE("split, chunk and unbind cut along a dim as PyTorch") {
  const Tensor x = iota({5, 2});
  std::vector<Tensor> parts = split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].shape() == Shape{1, 2});
  CHECK(parts[1].to_vector() == values({4, 5, 6, 7}));
  CHECK(split(x, 1, -1)[1].to_vector() == values({1, 3, 5, 7, 9}));
  CHECK(split(zeros({0, 2}), 0).size() == 1);
  CHECK(split(x, {0, 5}, 0)[0].shape() == Shape{0, 2});
  // chunk: ceil(size / chunks) per piece, so fewer pieces than asked when fewer suffice.
  const auto sizes = [](const std::vector<Tensor>& pieces) {
    std::vector<std::int64_t> s;
    for (const auto& p : pieces) s.push_back(p.size(0));
    return s;
  };
  CHECK(sizes(chunk(x, 4)) == std::vector<std::int64_t>{2, 2, 1});
  CHECK(sizes(chunk(iota({6}), 4)) == std::vector<std::int64_t>{2, 2, 2});
  CHECK(sizes(chunk(iota({3}), 5)) == std::vector<std::int64_t>{1, 1, 1});
  CHECK(sizes(chunk(zeros({0}), 3)) == std::vector<std::int64_t>{0, 0, 0});
  const std::vector<Tensor> columns = unbind(x, -1);
  REQUIRE(columns.size() == 2);
  CHECK(columns[1].shape() == Shape{5});
  CHECK(columns[1].to_vector() == values({1, 3, 5, 7, 9}));
  CHECK(unbind(iota({3}, DType::Int64))[2].item() == 2.0);
}

TEST_CASE("split, chunk and unbind pieces are views: a write through a piece shows in the input") {
  Tensor x = iota({4, 3});
  const std::uint64_t version = x.version();
  std::vector<Tensor> rows = split(x, 2);
  rows[1].fill_(-1.0);
  CHECK(x.to_vector() == values({0, 1, 2, 3, 4, 5, -1, -1, -1, -1, -1, -1}));
  CHECK(x.version() > version);
  x.chunk(3, 1)[2].fill_(7.0);
  CHECK(x.select(1, 2).to_vector() == values({7, 7, 7, 7}));
  x.unbind(0)[0].copy_(from_vector(std::vector<double>{10, 11, 12}, {3}, f64()));
  CHECK(x.select(0, 0).to_vector() == values({10, 11, 12}));
  x.split(std::vector<std::int64_t>{1, 2}, -1)[0].zero_();
  CHECK(x.select(1, 0).to_vector() == values({0, 0, 0, 0}));
  // And the other way: a write into the input shows through an earlier piece.
  const Tensor last = unbind(x, 1)[1];
  x.fill_(3.0);
  CHECK(last.to_vector() == values({3, 3, 3, 3}));
  CHECK(rows[0].storage_offset() == 0);
  CHECK(rows[1].storage_offset() == 6);
}

TEST_CASE("flip reverses the given dims, int64 and 0-dim included") {
  const Tensor x = iota({2, 3}, DType::Int64);
  CHECK(flip(x, {1}).to_vector() == values({2, 1, 0, 5, 4, 3}));
  CHECK(flip(x, {0, -1}).to_vector() == values({5, 4, 3, 2, 1, 0}));
  CHECK(flip(x, {}).to_vector() == x.to_vector());
  CHECK(flip(x, {1}).dtype() == DType::Int64);
  CHECK(flip(scalar_tensor(4.0), {0}).item() == 4.0);
  CHECK(flip(transpose(iota({3, 2}), 0, 1), {1}).to_vector() == values({4, 2, 0, 5, 3, 1}));
}

TEST_CASE("pad fills, crops, reflects and replicates like torch.nn.functional.pad") {
  const Tensor x = iota({1, 1, 3});
  CHECK(pad(x, {1, 2}).to_vector() == values({0, 0, 1, 2, 0, 0}));
  CHECK(pad(x, {1, 0, 1, 0}, PadMode::Constant, -1.0).shape() == Shape{1, 2, 4});
  CHECK(pad(x, {-1, 0}).to_vector() == values({1, 2}));
  CHECK(pad(x, {0, 0, 0, 0, 1, 0}).shape() == Shape{2, 1, 3});
  CHECK(pad(x, {-3, 0}).shape() == Shape{1, 1, 0});
  CHECK(pad(x, {2, 2}, PadMode::Reflect).to_vector() == values({2, 1, 0, 1, 2, 1, 0}));
  CHECK(pad(x, {2, 1}, PadMode::Replicate).to_vector() == values({0, 0, 0, 1, 2, 2}));
  CHECK(pad(iota({1, 2, 2}), {0, 0, 1, 1}, PadMode::Replicate).to_vector() == values({0, 1, 0, 1, 2, 3, 2, 3}));
  const Tensor labels = pad(iota({2, 2}, DType::Int64), {1, 0}, PadMode::Constant, 9.0);
  CHECK(labels.dtype() == DType::Int64);
  CHECK(labels.to_vector() == values({9, 0, 1, 9, 2, 3}));
  CHECK(pad(x, {}).to_vector() == x.to_vector());
  // A transposed (non-contiguous) input is read through its strides in every mode.
  const Tensor t = transpose(iota({3, 2}), 0, 1);  // [[0 2 4] [1 3 5]]
  CHECK(pad(t, {1, 0}).to_vector() == values({0, 0, 2, 4, 0, 1, 3, 5}));
  CHECK(pad(t, {1, 0}, PadMode::Reflect).to_vector() == values({2, 0, 2, 4, 3, 1, 3, 5}));
}

TEST_CASE("the gradients of reflect and replicate padding sum the copies of each border element") {
  Tensor x = zeros({1, 3}, f64().with_requires_grad());
  sum(pad(x, {2, 2}, PadMode::Reflect)).backward();  // [2 1 0 1 2 1 0]: element 1 appears 3 times
  CHECK(x.grad().to_vector() == values({2, 3, 2}));
  Tensor y = zeros({1, 2}, f64().with_requires_grad());
  sum(pad(y, {3, 1}, PadMode::Replicate)).backward();
  CHECK(y.grad().to_vector() == values({4, 2}));
}

TEST_CASE("bmm multiplies matching batches; baddbmm scales and adds a broadcast input") {
  const Tensor a = iota({2, 1, 2}), b = iota({2, 2, 1});
  CHECK(bmm(a, b).to_vector() == values({1, 13}));
  CHECK(baddbmm(ones({1}, f64()), a, b, 2.0, 0.5).to_vector() == values({2.5, 8.5}));
  const Tensor nan = full({1}, std::nan(""), f64());
  CHECK(baddbmm(nan, a, b, 0.0).to_vector() == values({1, 13}));  // beta 0 ignores input, NaN included
  CHECK(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).shape() == Shape{0, 2, 4});
}

// ---- errors ----

TEST_CASE("sequence shape ops name the op and the shapes when the arguments are wrong") {
  CHECK_THROWS_WITH(triu(zeros({3})), "triu: input tensor must have at least 2 dimensions, got shape [3]");
  CHECK_THROWS_WITH(tril(scalar_tensor(1.0)), "tril: input tensor must have at least 2 dimensions, got shape []");
  CHECK_THROWS_WITH(split(zeros({3}), 0),
                    "split: split_size can only be 0 if dimension size is 0, but got dimension size of 3 (dim 0 of [3])");
  CHECK_THROWS_WITH(split(zeros({3}), -1), "split: expects split_size be non-negative, but got split_size=-1");
  CHECK_THROWS_WITH(split(zeros({5, 2}), {2, 2}),
                    "split_with_sizes: expects split_sizes to sum exactly to 5 (input tensor's size at dimension 0, "
                    "shape [5, 2]), but got split_sizes=[2, 2]");
  CHECK_THROWS_WITH(split(zeros({5}), {6, -1}),
                    "split_with_sizes: expects split_sizes have only non-negative entries, but got split_sizes=[6, -1]");
  CHECK_THROWS_WITH(split(scalar_tensor(1.0), 1), "split: expects at least a 1-dimensional tensor, got a 0-dim tensor");
  CHECK_THROWS_WITH(split(zeros({2, 3}), 1, 2), "split: dim 2 is out of range for a tensor of 2 dims");
  CHECK_THROWS_WITH(chunk(zeros({3}), 0), "chunk: expects `chunks` to be greater than 0, got: 0");
  CHECK_THROWS_WITH(chunk(zeros({3}), -2), "chunk: expects `chunks` to be greater than 0, got: -2");
  CHECK_THROWS_WITH(chunk(scalar_tensor(1.0), 1), "chunk: expects at least a 1-dimensional tensor, got a 0-dim tensor");
  CHECK_THROWS_WITH(unbind(scalar_tensor(1.0), 0), "unbind: dimension specified as 0 but tensor has no dimensions");
  CHECK_THROWS_WITH(unbind(zeros({3}), -2), "unbind: dim -2 is out of range for a tensor of 1 dims");
  CHECK_THROWS_WITH(flip(zeros({2, 3}), {0, -2}),
                    "flip: dim 0 appears multiple times in the list of dims [0, -2] (tensor of shape [2, 3])");
  CHECK_THROWS_WITH(flip(zeros({2, 3}), {2}), "flip: dim 2 is out of range for a tensor of 2 dims");
  CHECK_THROWS_WITH(pad(zeros({2, 3}), {1, 2, 3}),
                    "pad: the pad list must have an even length (pairs of before, after), got 3 entries [1, 2, 3]");
  CHECK_THROWS_WITH(pad(zeros({2, 3}), {1, 1, 1, 1, 1, 1}),
                    "pad: padding length too large: 6 entries [1, 1, 1, 1, 1, 1] for an input of 2 dims (shape [2, "
                    "3]), at most 4");
  CHECK_THROWS_WITH(pad(zeros({2, 3}), {-2, -2}),
                    "pad: the input size 3, plus negative padding -2 and -2, resulted in a negative output size (-1) "
                    "at dimension 1 of input [2, 3]");
  CHECK_THROWS_WITH(pad(zeros({1, 2, 3}), {3, 0}, PadMode::Reflect),
                    "pad: reflect padding size should be less than the corresponding input dimension, but got "
                    "padding (3, 0) at dimension 2 of input [1, 2, 3]");
  CHECK_THROWS_WITH(pad(zeros({1, 2, 3}), {0, 0, 1, 2}, PadMode::Reflect),
                    "pad: reflect padding size should be less than the corresponding input dimension, but got "
                    "padding (1, 2) at dimension 1 of input [1, 2, 3]");
  CHECK_THROWS_WITH(pad(zeros({3}), {1, 1}, PadMode::Reflect),
                    Catch::StartsWith("pad: reflect padding of the last 1 dims (pad list of 2 entries) needs a 2-D or "
                                      "3-D (batched) input, got shape [3]"));
  CHECK_THROWS_WITH(pad(zeros({2, 3, 4, 5}), {1, 1}, PadMode::Replicate),
                    Catch::StartsWith("pad: replicate padding of the last 1 dims"));
  CHECK_THROWS_WITH(pad(zeros({1, 2, 3, 4, 5}), {1, 1, 1, 1, 1, 1, 1, 1}, PadMode::Replicate),
                    Catch::StartsWith("pad: replicate padding of the last 4 dims"));
  CHECK_THROWS_WITH(pad(zeros({1, 2, 3}), {-3, 0}, PadMode::Replicate),
                    "pad: input [1, 2, 3] is too small for replicate padding (-3, 0) at dimension 2: output size 0");
  CHECK_THROWS_WITH(pad(zeros({1, 2, 0}), {0, 0}, PadMode::Replicate),
                    "pad: input [1, 2, 0] is too small for replicate padding (0, 0) at dimension 2: output size 0");
  CHECK_THROWS_WITH(pad(iota({1, 3}, DType::Int64), {1, 1}, PadMode::Reflect),
                    "pad: reflect padding is not implemented for int64 (input [1, 3]), as in PyTorch");
  CHECK_THROWS_WITH(bmm(zeros({2, 3}), zeros({2, 3, 4})), "bmm: batch1 must be a 3D tensor, got shape [2, 3]");
  CHECK_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({3, 4})), "bmm: batch2 must be a 3D tensor, got shape [3, 4]");
  CHECK_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({2, 4, 4})),
                    "bmm: expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4] "
                    "(batch1 [2, 2, 3], batch2 [2, 4, 4])");
  CHECK_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({3, 3, 4})),
                    Catch::StartsWith("bmm: expected size for first two dimensions of batch2 tensor to be: [2, 3] but "
                                      "got: [3, 3]"));
  CHECK_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({2, 3, 4}, f64())),
                    "bmm: expected scalar type float32 but found float64 (batch1 [2, 2, 3], batch2 [2, 3, 4])");
  CHECK_THROWS_WITH(bmm(iota({1, 1, 1}, DType::Int64), iota({1, 1, 1}, DType::Int64)),
                    "bmm: expected float32 or float64 tensors, got int64");
  CHECK_THROWS_WITH(baddbmm(zeros({4, 3}), zeros({2, 2, 3}), zeros({2, 3, 4})),
                    "baddbmm: input of shape [4, 3] cannot be broadcast to the product's shape [2, 2, 4]");
  CHECK_THROWS_WITH(baddbmm(zeros({3, 2, 4}), zeros({2, 2, 3}), zeros({2, 3, 4})),
                    "baddbmm: input of shape [3, 2, 4] cannot be broadcast to the product's shape [2, 2, 4]");
  CHECK_THROWS_WITH(baddbmm(zeros({2, 4}), zeros({2, 3}), zeros({2, 3, 4})),
                    "baddbmm: batch1 must be a 3D tensor, got shape [2, 3]");
  CHECK_THROWS_WITH(baddbmm(zeros({4}, f64()), zeros({2, 2, 3}), zeros({2, 3, 4})),
                    "baddbmm: expected scalar type float32 but found float64 for input [4]");
}

// ---- gradient properties (float64; each op's output squared, so gradgradcheck runs its backward's backward) ----

TEST_CASE("triu and tril gradients and second derivatives are right") {
  rc::prop("random batched matrices and diagonals", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(2, 4, 1, 3));
    const auto diagonal = *rc::gen::inRange<std::int64_t>(-4, 5);
    const bool upper = *rc::gen::arbitrary<bool>();
    const auto f = squared([=](V v) { return upper ? triu(v[0], diagonal) : tril(v[0], diagonal); });
    TAPEGRAD_RC_GRADCHECK(f, as_list({x}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x}));
  });
}

TEST_CASE("split, split with sizes, chunk and unbind gradients and second derivatives are right") {
  rc::prop("random cuts along a random dim", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3, 1, 4));
    const std::int64_t dim = gen_dim(x.dim());
    const std::int64_t size = x.size(dim);
    const auto split_size = *rc::gen::inRange<std::int64_t>(1, 6);
    const auto chunks = *rc::gen::inRange<std::int64_t>(1, 6);
    // 1 to 4 pieces summing to size, empty pieces allowed: the gaps between sorted cut points.
    auto cuts = *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange<std::size_t>(0, 4),
                                                              rc::gen::inRange<std::int64_t>(0, size + 1));
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(size);
    std::vector<std::int64_t> sizes;
    for (std::size_t i = 0; i < cuts.size(); ++i) sizes.push_back(cuts[i] - (i == 0 ? 0 : cuts[i - 1]));
    const int which = *rc::gen::inRange(0, 4);
    RC_TAG(which);
    const auto f = squared([=](V v) {
      switch (which) {
        case 0: return rejoin(split(v[0], split_size, dim), dim, false);
        case 1: return rejoin(split(v[0], sizes, dim), dim, false);
        case 2: return rejoin(chunk(v[0], chunks, dim), dim, false);
        default: return rejoin(unbind(v[0], dim), dim, true);
      }
    });
    TAPEGRAD_RC_GRADCHECK(f, as_list({x}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x}));
  });
}

TEST_CASE("flip gradients and second derivatives are right") {
  rc::prop("a random set of dims, negative ones included", [] {
    const Tensor x = *gen::tensor(4, 3);
    const auto n = std::max<std::int64_t>(x.dim(), 1);
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < n; ++d)
      if (*rc::gen::arbitrary<bool>()) dims.push_back(*rc::gen::arbitrary<bool>() ? d : d - n);
    const auto f = squared([=](V v) { return flip(v[0], dims); });
    TAPEGRAD_RC_GRADCHECK(f, as_list({x}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x}));
  });
}

TEST_CASE("constant pad gradients and second derivatives are right, crops included") {
  rc::prop("random pads (negative ones crop) and fill value", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3, 1, 3));
    const auto padded = *rc::gen::inRange<std::int64_t>(0, x.dim() + 1);
    std::vector<std::int64_t> pads;
    for (std::int64_t k = 0; k < padded; ++k) {
      const std::int64_t size = x.size(x.dim() - 1 - k);
      const auto before = *rc::gen::inRange<std::int64_t>(-size, 3);
      pads.push_back(before);
      pads.push_back(*rc::gen::inRange<std::int64_t>(-size - before, 3));
    }
    const double value = *gen::value();
    const auto f = squared([=](V v) { return pad(v[0], pads, PadMode::Constant, value); });
    TAPEGRAD_RC_GRADCHECK(f, as_list({x}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x}));
  });
}

TEST_CASE("reflect and replicate pad gradients and second derivatives are right") {
  rc::prop("1 to 3 padded dims, with or without a batch dim", [] {
    const auto padded = *rc::gen::inRange<std::int64_t>(1, 4);
    const auto lead = *rc::gen::inRange<std::int64_t>(1, 3);
    Shape shape = *rc::gen::container<Shape>(static_cast<std::size_t>(lead), rc::gen::inRange<std::int64_t>(1, 3));
    for (std::int64_t k = 0; k < padded; ++k) shape.push_back(*rc::gen::inRange<std::int64_t>(1, 4));
    const Tensor x = *gen::tensor_of_shape(shape);
    const PadMode mode = *rc::gen::arbitrary<bool>() ? PadMode::Reflect : PadMode::Replicate;
    RC_TAG(mode == PadMode::Reflect ? "reflect" : "replicate");
    std::vector<std::int64_t> pads;
    for (std::int64_t k = 0; k < padded; ++k) {
      const std::int64_t size = x.size(x.dim() - 1 - k);
      const std::int64_t most = mode == PadMode::Reflect ? size - 1 : 3;
      const auto before = *rc::gen::inRange<std::int64_t>(-(size - 1), most + 1);
      // The output keeps at least one element: before + after >= 1 - size.
      pads.push_back(before);
      pads.push_back(*rc::gen::inRange<std::int64_t>(std::max<std::int64_t>(1 - size - before, -(size - 1)), most + 1));
    }
    const auto f = squared([=](V v) { return pad(v[0], pads, mode); });
    TAPEGRAD_RC_GRADCHECK(f, as_list({x}));
    TAPEGRAD_RC_GRADGRADCHECK(f, as_list({x}));
  });
}

TEST_CASE("bmm and baddbmm gradients and second derivatives are right") {
  rc::prop("random batch, rows, inner and columns; input broadcast", [] {
    const auto batch = *rc::gen::inRange<std::int64_t>(1, 4), n = *rc::gen::inRange<std::int64_t>(1, 4);
    const auto k = *rc::gen::inRange<std::int64_t>(0, 4), m = *rc::gen::inRange<std::int64_t>(1, 4);
    const Tensor a = *gen::tensor_of_shape({batch, n, k}), b = *gen::tensor_of_shape({batch, k, m});
    Shape input_shape{batch, n, m};
    input_shape.erase(input_shape.begin(), input_shape.begin() + *rc::gen::inRange<std::ptrdiff_t>(0, 4));
    for (auto& extent : input_shape)
      if (*rc::gen::arbitrary<bool>()) extent = 1;
    const Tensor input = *gen::tensor_of_shape(input_shape);
    const double beta = *gen::value(), alpha = *gen::value();
    const auto product = squared([](V v) { return bmm(v[0], v[1]); });
    TAPEGRAD_RC_GRADCHECK(product, as_list({a, b}));
    TAPEGRAD_RC_GRADGRADCHECK(product, as_list({a, b}));
    const auto fused = squared([=](V v) { return baddbmm(v[0], v[1], v[2], beta, alpha); });
    TAPEGRAD_RC_GRADCHECK(fused, as_list({input, a, b}));
    TAPEGRAD_RC_GRADGRADCHECK(fused, as_list({input, a, b}));
  });
}
