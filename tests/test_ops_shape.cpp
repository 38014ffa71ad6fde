// Shape ops: closed forms against PyTorch's results, gradients over random shapes, double backward, errors.
#include <algorithm>
#include <numeric>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor iota(const Shape& shape) { return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, DType::Float64).reshape(shape); }
Tensor indices(const std::vector<std::int64_t>& values, const Shape& shape) { return from_vector(values, shape); }
std::vector<Tensor> as_list(std::initializer_list<Tensor> tensors) { return tensors; }

// f(x) * f(x): makes the second derivative run through f's backward-of-backward.
template <class F>
TensorFunction squared(F f) {
  return [f](const std::vector<Tensor>& x) {
    Tensor y = f(x);
    return y * y;
  };
}

std::int64_t gen_dim(std::int64_t ndim) { return *rc::gen::inRange<std::int64_t>(-ndim, ndim); }

}  // namespace

// ---- closed forms ----

TEST_CASE("transpose and permute move elements like PyTorch") {
  Tensor x = iota({2, 3});
  Tensor t = transpose(x, 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(transpose(x, -1, -2).to_vector() == t.to_vector());
  Tensor p = permute(iota({2, 3, 4}), {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.at({1, 1, 2}) == iota({2, 3, 4}).at({1, 2, 1}));
  CHECK(transpose(scalar_tensor(5.0), 0, -1).item() == 5.0);
}

TEST_CASE("flatten, squeeze and unsqueeze only relabel the shape") {
  Tensor x = iota({2, 1, 3, 1});
  CHECK(flatten(x).shape() == Shape{6});
  CHECK(flatten(x, 1).shape() == Shape{2, 3});
  CHECK(flatten(x, 1, 2).shape() == Shape{2, 3, 1});
  CHECK(flatten(scalar_tensor(1.0)).shape() == Shape{1});
  CHECK(squeeze(x).shape() == Shape{2, 3});
  CHECK(squeeze(x, 1).shape() == Shape{2, 3, 1});
  CHECK(squeeze(x, 0).shape() == Shape{2, 1, 3, 1});  // extent 2: unchanged, as in PyTorch
  CHECK(squeeze(x, -1).shape() == Shape{2, 1, 3});
  CHECK(unsqueeze(x, 0).shape() == Shape{1, 2, 1, 3, 1});
  CHECK(unsqueeze(x, -1).shape() == Shape{2, 1, 3, 1, 1});
  CHECK(unsqueeze(iota({3}), 1).shape() == Shape{3, 1});
  CHECK(squeeze(x).to_vector() == x.to_vector());
  CHECK(squeeze(x).raw_data() == x.raw_data());
}

TEST_CASE("cat and stack join along the given dim") {
  Tensor a = iota({2, 2}), b = iota({2, 1}) + 10.0;
  Tensor c = cat({a, b}, 1);
  CHECK(c.shape() == Shape{2, 3});
  CHECK(c.to_vector() == std::vector<double>{0, 1, 10, 2, 3, 11});
  CHECK(cat({a, a}, -2).to_vector() == std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3});
  Tensor s = stack({a, a + 4.0}, 1);
  CHECK(s.shape() == Shape{2, 2, 2});
  CHECK(s.to_vector() == std::vector<double>{0, 1, 4, 5, 2, 3, 6, 7});
  CHECK(stack({scalar_tensor(1.0, DType::Float64), scalar_tensor(2.0, DType::Float64)}).to_vector() ==
        std::vector<double>{1, 2});
  Tensor labels = cat({indices({1, 2}, {2}), indices({3}, {1})});
  CHECK(labels.dtype() == DType::Int64);
  CHECK(labels.to_vector() == std::vector<double>{1, 2, 3});
}

TEST_CASE("cat of more than 64 tensors that require grad still backpropagates to each") {
  std::vector<Tensor> parts;
  for (int i = 0; i < 100; ++i) parts.push_back(full({1, 2}, i, f64().with_requires_grad()));
  Tensor joined = cat(parts, 0);
  CHECK(joined.shape() == Shape{100, 2});
  CHECK(joined.at({70, 1}) == 70.0);
  sum(joined * joined).backward();
  for (int i = 0; i < 100; ++i) CHECK(parts[static_cast<std::size_t>(i)].grad().to_vector() == std::vector<double>(2, 2.0 * i));
  std::vector<Tensor> rows;
  for (int i = 0; i < 70; ++i) rows.push_back(full({2}, i, f64().with_requires_grad()));
  sum(stack(rows, 1)).backward();
  CHECK(rows[69].grad().to_vector() == std::vector<double>{1, 1});
}

TEST_CASE("slice follows Python slicing: negative indices, clamping, steps") {
  Tensor x = iota({6});
  CHECK(slice(x, 0, 1, 4).to_vector() == std::vector<double>{1, 2, 3});
  CHECK(slice(x, 0, -2, 100).to_vector() == std::vector<double>{4, 5});
  CHECK(slice(x, 0, 0, 6, 2).to_vector() == std::vector<double>{0, 2, 4});
  CHECK(slice(x, 0, 1, 6, 4).to_vector() == std::vector<double>{1, 5});
  CHECK(slice(x, 0, -100, -3).to_vector() == std::vector<double>{0, 1, 2});
  CHECK(slice(x, 0, 4, 2).shape() == Shape{0});
  Tensor m = iota({3, 4});
  CHECK(slice(m, 1, 1, 3).to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(narrow(m, 0, -1, 1).to_vector() == std::vector<double>{8, 9, 10, 11});
}

TEST_CASE("the gradient of a slice lands in the sliced positions") {
  Tensor x = zeros({5}, f64().with_requires_grad());
  sum(slice(x, 0, 1, 5, 2) * 3.0).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 3, 0, 3, 0});
}

TEST_CASE("index_select, gather and their adjoints pick and accumulate") {
  Tensor x = iota({3, 2});
  Tensor picked = index_select(x, 0, indices({2, 0, 2}, {3}));
  CHECK(picked.to_vector() == std::vector<double>{4, 5, 0, 1, 4, 5});
  CHECK(index_select(x, 1, indices({1}, {1})).to_vector() == std::vector<double>{1, 3, 5});
  Tensor added = index_add(zeros({3, 2}, f64()), 0, indices({2, 0, 2}, {3}), ones({3, 2}, f64()));
  CHECK(added.to_vector() == std::vector<double>{1, 1, 0, 0, 2, 2});

  // Picking each row's label column, as cross-entropy does.
  Tensor logits = tensor({0.1, 0.2, 0.7, 0.5, 0.3, 0.2}, {2, 3}, f64());
  Tensor labels = indices({2, 0}, {2, 1});
  CHECK(gather(logits, 1, labels).to_vector() == std::vector<double>{0.7, 0.5});
  Tensor scattered = scatter_add(zeros({2, 3}, f64()), 1, indices({2, 2, 0, 1}, {2, 2}), ones({2, 2}, f64()));
  CHECK(scattered.to_vector() == std::vector<double>{0, 0, 2, 1, 1, 0});
  CHECK(gather(iota({2, 3}), 0, indices({1, 0, 1}, {1, 3})).to_vector() == std::vector<double>{3, 1, 5});
}

TEST_CASE("repeated indices accumulate their gradients") {
  Tensor x = zeros({3}, f64().with_requires_grad());
  sum(index_select(x, 0, indices({1, 1, 2, 1}, {4}))).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 3, 1});
  Tensor y = zeros({2, 2}, f64().with_requires_grad());
  sum(gather(y, 1, indices({0, 0, 0, 1, 1, 1}, {2, 3}))).backward();
  CHECK(y.grad().to_vector() == std::vector<double>{3, 0, 0, 3});
}

// ---- errors ----

TEST_CASE("shape ops name the op and the shapes when the input is wrong") {
  CHECK_THROWS_WITH(transpose(zeros({2, 3}), 0, 2), "transpose: dim 2 is out of range for a tensor of 2 dims");
  CHECK_THROWS_WITH(permute(zeros({2, 3}), {0}), "permute: expected 2 dims for a tensor of shape [2, 3], got [0]");
  CHECK_THROWS_WITH(permute(zeros({2, 3}), {1, -1}), "permute: dim -1 repeats in [1, -1]");
  CHECK_THROWS_WITH(flatten(zeros({2, 3, 4}), 2, 1), "flatten: start_dim 2 cannot come after end_dim 1");
  CHECK_THROWS_WITH(unsqueeze(zeros({2}), 3), "unsqueeze: dim 3 is out of range for a tensor of 2 dims");
  CHECK_THROWS_WITH(cat({}, 0), "cat: expected a non-empty list of tensors");
  CHECK_THROWS_WITH(cat({zeros({2, 3}), zeros({2, 4})}, 0),
                    "cat: sizes must match except in dim 0, got [2, 3] at position 0 and [2, 4] at position 1");
  CHECK_THROWS_WITH(cat({zeros({2, 3}), zeros({3})}, 0),
                    "cat: tensors must have the same number of dims, got [2, 3] at position 0 and [3] at position 1");
  CHECK_THROWS_WITH(cat({zeros({2}), zeros({2}, f64())}), "cat: dtype mismatch, float32 at position 0 and float64 at position 1");
  CHECK_THROWS_WITH(cat({scalar_tensor(1.0)}), "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  CHECK_THROWS_WITH(stack({zeros({2}), zeros({3})}),
                    "stack: expected all tensors to have the same shape, got [2] at position 0 and [3] at position 1");
  CHECK_THROWS_WITH(slice(zeros({4}), 0, 0, 4, 0), "slice: step must be positive, got 0");
  CHECK_THROWS_WITH(slice(scalar_tensor(1.0), 0, 0, 1), "slice: cannot slice a 0-dim tensor");
  CHECK_THROWS_WITH(narrow(zeros({4}), 0, 3, 2), "narrow: start (3) + length (2) exceeds dimension size (4)");
  CHECK_THROWS_WITH(narrow(zeros({4}), 0, 5, 0), "narrow: start 5 is out of range for dim 0 of size 4");
  CHECK_THROWS_WITH(index_select(zeros({3, 2}), 0, indices({0, 3}, {2})),
                    "index_select: index 3 is out of bounds for dim 0 with size 3");
  CHECK_THROWS_WITH(index_select(zeros({3, 2}), 0, zeros({2})),
                    "index_select: index must be an int64 tensor, got float32 of shape [2]");
  CHECK_THROWS_WITH(index_select(zeros({3, 2}), 0, indices({0, 1}, {1, 2})), "index_select: index must be 1-D, got shape [1, 2]");
  CHECK_THROWS_WITH(gather(zeros({2, 3}), 1, indices({3, 0}, {2, 1})), "gather: index 3 is out of bounds for dim 1 with size 3");
  CHECK_THROWS_WITH(gather(zeros({2, 3}), 1, indices({0, 0}, {2})),
                    "gather: index [2] must have as many dims as the input [2, 3]");
  CHECK_THROWS_WITH(gather(zeros({2, 3}), 1, indices({0, 0, 0}, {3, 1})),
                    "gather: index [3, 1] is larger than the input [2, 3] in dim 0");
  CHECK_THROWS_WITH(scatter_add(zeros({2, 3}), 1, indices({0, 0}, {2, 1}), zeros({2, 2})),
                    Catch::StartsWith("scatter_add: src [2, 2] float32 must have the index's shape [2, 1]"));
  CHECK_THROWS_WITH(index_add(zeros({3, 2}), 0, indices({0}, {1}), zeros({2, 2})),
                    Catch::StartsWith("index_add: source [2, 2] float32 must be [1, 2] float32"));
}

// ---- gradient properties ----

TEST_CASE("transpose and permute gradients are right") {
  rc::prop("random dims and permutations", [] {
    const Tensor x = *gen::tensor(3);
    const auto n = std::max<std::int64_t>(x.dim(), 1);
    const std::int64_t d0 = gen_dim(n), d1 = gen_dim(n);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return transpose(v[0], d0, d1); }), as_list({x}));
    std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
    std::iota(dims.begin(), dims.end(), 0);
    const auto order = *rc::gen::arbitrary<std::vector<int>>();
    for (std::size_t i = 0; i < dims.size() && i < order.size(); ++i)
      std::swap(dims[i], dims[static_cast<std::size_t>(std::abs(order[i] % static_cast<int>(dims.size())))]);
    TAPEGRAD_RC_GRADCHECK([=](const std::vector<Tensor>& v) { return permute(v[0], dims); }, as_list({x}));
  });
}

TEST_CASE("flatten, squeeze and unsqueeze gradients are right") {
  rc::prop("random dims", [] {
    const Tensor x = *gen::tensor(3, 2);
    const auto n = std::max<std::int64_t>(x.dim(), 1);
    const std::int64_t a = gen_dim(n), b = gen_dim(n);
    const std::int64_t rank = squeeze(x, a).dim(), u = *rc::gen::inRange<std::int64_t>(-rank - 1, rank + 1);
    TAPEGRAD_RC_GRADCHECK(
        [=](const std::vector<Tensor>& v) {
          Tensor y = flatten(v[0], std::min(a < 0 ? a + n : a, b < 0 ? b + n : b), std::max(a < 0 ? a + n : a, b < 0 ? b + n : b));
          return unsqueeze(squeeze(y), 0) * sum(unsqueeze(squeeze(v[0], a), u));
        },
        as_list({x}));
  });
}

TEST_CASE("cat and stack gradients are right for any number of inputs") {
  rc::prop("1 to 4 tensors along a random dim", [] {
    Shape base = *gen::shape(1, 3);
    const std::int64_t dim = gen_dim(static_cast<std::int64_t>(base.size()));
    const int count = *rc::gen::inRange(1, 5);
    std::vector<Tensor> parts, same;
    for (int i = 0; i < count; ++i) {
      Shape s = base;
      s[static_cast<std::size_t>(dim < 0 ? dim + static_cast<std::int64_t>(s.size()) : dim)] = *rc::gen::inRange<std::int64_t>(0, 4);
      parts.push_back(*gen::tensor_of_shape(s));
      same.push_back(*gen::tensor_of_shape(base));
    }
    TAPEGRAD_RC_GRADCHECK(squared([dim](const std::vector<Tensor>& v) { return cat(v, dim); }), parts);
    const std::int64_t stack_dim = *rc::gen::inRange<std::int64_t>(-static_cast<std::int64_t>(base.size()) - 1,
                                                                   static_cast<std::int64_t>(base.size()) + 1);
    TAPEGRAD_RC_GRADCHECK(squared([stack_dim](const std::vector<Tensor>& v) { return stack(v, stack_dim); }), same);
  });
}

TEST_CASE("slice and narrow gradients are right for random ranges") {
  rc::prop("start, end in [-6, 6], step 1 to 3", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3));
    const std::int64_t dim = gen_dim(x.dim());
    const auto start = *rc::gen::inRange<std::int64_t>(-6, 7), end = *rc::gen::inRange<std::int64_t>(-6, 7);
    const auto step = *rc::gen::inRange<std::int64_t>(1, 4);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return slice(v[0], dim, start, end, step); }),
                          as_list({x}));
    const std::int64_t size = x.size(dim);
    const auto from = *rc::gen::inRange<std::int64_t>(0, size + 1);
    const auto length = *rc::gen::inRange<std::int64_t>(0, size - from + 1);
    TAPEGRAD_RC_GRADCHECK([=](const std::vector<Tensor>& v) { return narrow(v[0], dim, from, length); }, as_list({x}));
  });
}

TEST_CASE("index_select and index_add gradients are right, repeats included") {
  rc::prop("random indices along a random dim", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3));
    const std::int64_t dim = gen_dim(x.dim());
    const auto count = *rc::gen::inRange<std::int64_t>(0, 6);
    const auto values = *rc::gen::container<std::vector<std::int64_t>>(static_cast<std::size_t>(count),
                                                                        rc::gen::inRange<std::int64_t>(0, x.size(dim)));
    const Tensor index = from_vector(values, {count});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return index_select(v[0], dim, index); }),
                          as_list({x}));
    Shape source_shape = x.shape();
    source_shape[static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim)] = count;
    const Tensor source = *gen::tensor_of_shape(source_shape);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return index_add(v[0], dim, index, v[1]); }),
                          as_list({x, source}));
  });
}

TEST_CASE("gather and scatter_add gradients are right, repeats included") {
  rc::prop("random index of the input's rank", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3));
    const std::int64_t dim = gen_dim(x.dim());
    const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
    Shape index_shape = x.shape();
    for (std::size_t k = 0; k < index_shape.size(); ++k)
      index_shape[k] = k == d ? *rc::gen::inRange<std::int64_t>(1, 5) : *rc::gen::inRange<std::int64_t>(1, x.shape()[k] + 1);
    const auto values = *rc::gen::container<std::vector<std::int64_t>>(static_cast<std::size_t>(shape_numel(index_shape)),
                                                                        rc::gen::inRange<std::int64_t>(0, x.shape()[d]));
    const Tensor index = from_vector(values, index_shape);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return gather(v[0], dim, index); }), as_list({x}));
    const Tensor src = *gen::tensor_of_shape(index_shape);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return scatter_add(v[0], dim, index, v[1]); }),
                          as_list({x, src}));
  });
}

TEST_CASE("shape ops have second derivatives") {
  rc::prop("squared outputs of each op", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(2, 3, 1, 3));
    const std::int64_t dim = gen_dim(x.dim());
    const Tensor index = from_vector(std::vector<std::int64_t>{0, 0}, {2});
    Shape gather_shape = x.shape();
    std::fill(gather_shape.begin(), gather_shape.end(), 1);
    const Tensor gather_index = zeros(gather_shape, TensorOptions{}.with_dtype(DType::Int64));
    const int which = *rc::gen::inRange(0, 6);
    RC_TAG(which);
    TAPEGRAD_RC_GRADGRADCHECK(squared([=](const std::vector<Tensor>& v) {
                                switch (which) {
                                  case 0: return transpose(v[0], 0, dim);
                                  case 1: return cat({v[0], v[0] * 2.0}, dim);
                                  case 2: return stack({v[0], v[0]}, dim);
                                  case 3: return slice(v[0], dim, 1, 3);
                                  case 4: return index_select(v[0], dim, index);
                                  default: return gather(v[0], dim, gather_index);
                                }
                              }),
                              as_list({x}));
  });
}
