// Indexing with libtorch's spelling: results against what PyTorch gives for the same Python index (worked
// out by hand for each case below), views vs copies, index_put_, gradients, errors.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::indexing;
using tapegrad::testing::allclose;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor iota(const Shape& shape) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, DType::Float64).reshape(shape);
}
Tensor longs(const std::vector<std::int64_t>& values, const Shape& shape) { return from_vector(values, shape); }
std::vector<double> values(std::initializer_list<double> v) { return v; }

template <class F>
TensorFunction squared(F f) {
  return [f](const std::vector<Tensor>& x) {
    Tensor y = f(x);
    return y * y;
  };
}

}  // namespace

TEST_CASE("integers, Slices, None and Ellipsis give views like x[0, 1::2, None, ...]") {
  Tensor x = iota({2, 4, 3});
  Tensor v = x.index({0, Slice(1, None, 2), None, Ellipsis});  // x[0, 1::2, None, ...]
  CHECK(v.shape() == Shape{2, 1, 3});
  CHECK(v.to_vector() == values({3, 4, 5, 9, 10, 11}));
  CHECK(v.strides() == Shape{6, 3, 1});  // torch: (6, 3, 1)
  CHECK(v.storage_offset() == 3);
  v.fill_(-1.0);  // a view: writes land in x
  CHECK(x.at({0, 1, 0}) == -1.0);
  CHECK(x.at({0, 3, 2}) == -1.0);
  CHECK(x.at({0, 2, 0}) == 6.0);

  Tensor y = iota({2, 4, 3});
  CHECK(y.index({Ellipsis, 1}).to_vector() == values({1, 4, 7, 10, 13, 16, 19, 22}));  // y[..., 1]
  CHECK(y.index({-1, -1, -1}).item() == 23.0);                                          // y[-1, -1, -1]
  CHECK(y.index({Slice(), Slice(None, -2)}).shape() == Shape{2, 2, 3});                 // y[:, :-2]
  CHECK(y.index({Slice(), Slice(-3, 3)}).to_vector() == values({3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20}));
  CHECK(y.index({Slice(5, 9)}).shape() == Shape{0, 4, 3});  // y[5:9]: clamped, empty
  CHECK(y.index({None, Ellipsis, None}).shape() == Shape{1, 2, 4, 3, 1});
  CHECK(y.index({1, Slice(None, None, 3), 2}).to_vector() == values({14, 23}));  // y[1, ::3, 2]
  CHECK(y.index({}).is_same(y));
}

TEST_CASE("int64 index tensors pick rows and broadcast together (advanced indexing copies)") {
  Tensor x = iota({3, 4});
  Tensor rows = x.index({longs({2, 0, 2}, {3})});  // x[[2, 0, 2]]
  CHECK(rows.shape() == Shape{3, 4});
  CHECK(rows.to_vector() == values({8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  rows.fill_(0.0);
  CHECK(x.at({2, 0}) == 8.0);  // a copy
  // x[[0, 2], [1, 3]] -> elements (0, 1) and (2, 3)
  CHECK(x.index({longs({0, 2}, {2}), longs({1, 3}, {2})}).to_vector() == values({1, 11}));
  // x[[[0], [2]], [1, 3]]: index shapes [2, 1] and [2] broadcast to [2, 2]
  Tensor b = x.index({longs({0, 2}, {2, 1}), longs({1, 3}, {2})});
  CHECK(b.shape() == Shape{2, 2});
  CHECK(b.to_vector() == values({1, 3, 9, 11}));
  CHECK(x.index({Slice(), longs({-1, 0}, {2})}).to_vector() == values({3, 0, 7, 4, 11, 8}));  // x[:, [-1, 0]]
  // Adjacent indexed dims stay in place, separated ones go first (PyTorch's rule).
  Tensor z = iota({2, 3, 4, 5});
  CHECK(z.index({Slice(), longs({0, 1}, {2}), longs({1, 2}, {2})}).shape() == Shape{2, 2, 5});
  CHECK(z.index({Slice(), longs({0, 1}, {2}), Slice(), longs({1, 2}, {2})}).shape() == Shape{2, 2, 4});
  CHECK(z.index({1, Slice(), longs({3}, {1})}).shape() == Shape{3, 1, 5});
  CHECK(z.index({Slice(), longs({0, 1}, {2}), Slice(), longs({1, 2}, {2})}).to_vector() ==
        values({1, 6, 11, 16, 61, 66, 71, 76, 22, 27, 32, 37, 82, 87, 92, 97}));
  CHECK(z.index({Slice(), longs({2}, {})}).shape() == Shape{2, 4, 5});  // a 0-dim index drops the dim
}

TEST_CASE("masks select the true positions, in row-major order") {
  Tensor x = tensor({1, -2, 3, -4, 5, -6}, {2, 3}, f64());
  Tensor positive = x.index({gt(x, 0.0)});  // x[x > 0]
  CHECK(positive.shape() == Shape{3});
  CHECK(positive.to_vector() == values({1, 3, 5}));
  Tensor row_mask = tensor({0, 1}, {2}, f64());
  CHECK(x.index({row_mask}).to_vector() == values({-4, 5, -6}));  // x[[False, True]]
  CHECK(x.index({Slice(), Mask(longs({1, 0, 1}, {3}))}).to_vector() == values({1, 3, -4, -6}));
  CHECK(x.index({lt(x, -10.0)}).shape() == Shape{0});
  CHECK(nonzero(tensor({0, 1, 1, 0}, {2, 2})).to_vector() == values({0, 1, 1, 0}));
}

TEST_CASE("index_put_ writes values, broadcast, through basic and advanced indices") {
  Tensor x = zeros({3, 4}, f64());
  x.index_put_({1}, tensor({1, 2, 3, 4}, {4}, f64()));  // x[1] = [1, 2, 3, 4]
  x.index_put_({Slice(), 0}, 9.0);                        // x[:, 0] = 9
  CHECK(x.to_vector() == values({9, 0, 0, 0, 9, 2, 3, 4, 9, 0, 0, 0}));
  x.index_put_({longs({0, 2}, {2}), longs({3, 1}, {2})}, tensor({5, 6}, {2}, f64()));  // x[[0, 2], [3, 1]] = [5, 6]
  CHECK(x.to_vector() == values({9, 0, 0, 5, 9, 2, 3, 4, 9, 6, 0, 0}));
  x.index_put_({gt(x, 4.0)}, 0.0);  // x[x > 4] = 0
  CHECK(x.to_vector() == values({0, 0, 0, 0, 0, 2, 3, 4, 0, 0, 0, 0}));
  x.index_put_({Slice(), longs({0, 2}, {2})}, tensor({7, 8}, {2}, f64()));  // x[:, [0, 2]] = [7, 8] (rows broadcast)
  CHECK(x.to_vector() == values({7, 0, 8, 0, 7, 2, 8, 4, 7, 0, 8, 0}));
  const std::uint64_t before = x.version();
  x.t().index_put_({0, longs({1}, {1})}, 1.0);  // through a transposed view: x[1, 0] = 1
  CHECK(x.at({1, 0}) == 1.0);
  CHECK(x.version() == before + 1);
  Tensor z = zeros({2, 3, 4}, f64());
  z.index_put_({Slice(), longs({0, 2}, {2}), longs({1, 3}, {2})}, tensor({1, 2}, {2}, f64()));
  CHECK(sum(z).item() == 6.0);
  CHECK(z.at({1, 2, 3}) == 2.0);
}

TEST_CASE("index and index_put errors name the shapes") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH(x.index({3}), "index: index 3 is out of bounds for dim 0 with size 3 (position 0 of the index "
                                  "list, tensor of shape [3, 4])");
  CHECK_THROWS_WITH(x.index({0, 0, 0}),
                    "index: too many indices for a tensor of shape [3, 4]: the index list covers 3 dims");
  CHECK_THROWS_WITH(x.index({Ellipsis, Ellipsis}), Catch::Contains("at most one Ellipsis"));
  CHECK_THROWS_WITH(x.index({Slice(0, 2, 0)}), Catch::Contains("slice step must be positive, got 0"));
  CHECK_THROWS_WITH(x.index({longs({0, 5}, {2})}), "index: index 5 is out of bounds for dim 0 with size 3 (an index tensor)");
  CHECK_THROWS_WITH(x.index({ones({4})}), Catch::StartsWith("index: the shape of the mask [4] at position 0 of the "
                                                            "index list does not match the shape [3] of the indexed "
                                                            "tensor's dims 0 to 0"));
  CHECK_THROWS_WITH(x.index({full({3}, 2.0)}), Catch::Contains("must hold only 0 and 1, got 2"));
  CHECK_THROWS_WITH(x.index({longs({0, 1}, {2}), longs({0, 1, 2}, {3})}), Catch::Contains("index"));
  CHECK_THROWS_WITH(x.index_put_({Slice()}, zeros({2})), Catch::Contains("values of shape [2] cannot be broadcast to "
                                                                         "the indexed shape [3, 4]"));
  CHECK_THROWS_WITH(x.index_put_({0}, zeros({4}, f64())), Catch::Contains("values are float64 but the indexed tensor is "
                                                                          "float32"));
  Tensor w = zeros({3}, TensorOptions{}.with_requires_grad());
  CHECK_THROWS_WITH(w.index_put_({0}, 1.0), Catch::Contains("requires grad"));
  // Values that require grad are recorded since in-place ops are (test_inplace_autograd.cpp): x then requires grad.
  x.index_put_({0}, zeros({4}, TensorOptions{}.with_requires_grad()));
  CHECK(x.grad_fn_name() == "index_put_");
}

TEST_CASE("index is differentiable: basic, advanced and mask indices") {
  rc::prop("random shapes and indices", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(2, 3, 1, 4));
    const std::int64_t a = *rc::gen::inRange<std::int64_t>(-x.size(0), x.size(0));
    const std::int64_t start = *rc::gen::inRange<std::int64_t>(0, x.size(1));
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) {
                            return v[0].index({a, Slice(start, None, 2), None, Ellipsis});
                          }),
                          std::vector<Tensor>{x});
    const auto picks = *rc::gen::container<std::vector<std::int64_t>>(
        *rc::gen::inRange<std::size_t>(1, 5), rc::gen::inRange<std::int64_t>(0, x.size(1)));
    const Tensor idx = from_vector(picks, {static_cast<std::int64_t>(picks.size())});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].index({Slice(), idx}); }),
                          std::vector<Tensor>{x});
    const auto rows = *rc::gen::container<std::vector<std::int64_t>>(
        picks.size(), rc::gen::inRange<std::int64_t>(-x.size(0), x.size(0)));
    const Tensor row_idx = from_vector(rows, {static_cast<std::int64_t>(rows.size())});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].index({row_idx, idx}); }),
                          std::vector<Tensor>{x});
    const Tensor mask = gt(*gen::tensor_of_shape(x.shape()), 0.0);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return v[0].index({mask}); }),
                          std::vector<Tensor>{x});
  });
}

TEST_CASE("index_put is differentiable in the tensor and the values") {
  rc::prop("random positions and broadcast values", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(2, 3, 1, 4));
    const auto picks = *rc::gen::unique<std::vector<std::int64_t>>(
        *rc::gen::inRange<std::size_t>(1, static_cast<std::size_t>(x.size(1)) + 1),
        rc::gen::inRange<std::int64_t>(0, x.size(1)));
    const Tensor idx = from_vector(picks, {static_cast<std::int64_t>(picks.size())});
    Shape vs = x.shape();
    vs[1] = idx.numel();
    const Tensor v_full = *gen::tensor_of_shape(vs);
    const Tensor v_row = *gen::tensor_of_shape({idx.numel(), 1});  // broadcast along the last dims
    const Tensor v_scalar = *gen::tensor_of_shape({});
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) {
                            return index_put(v[0], {Slice(), idx}, v[1]);
                          }),
                          (std::vector<Tensor>{x, v_full}));
    if (x.dim() == 2)
      TAPEGRAD_RC_GRADCHECK([=](const std::vector<Tensor>& v) { return index_put(v[0], {Slice(), idx}, v[1]); },
                            (std::vector<Tensor>{x, v_row.reshape({idx.numel()})}));
    TAPEGRAD_RC_GRADCHECK([=](const std::vector<Tensor>& v) { return index_put(v[0], {0}, v[1]); },
                          (std::vector<Tensor>{x, v_scalar}));
    const Tensor mask = gt(*gen::tensor_of_shape(x.shape()), 0.0);
    TAPEGRAD_RC_GRADCHECK(squared([=](const std::vector<Tensor>& v) { return index_put(v[0], {mask}, v[1]); }),
                          (std::vector<Tensor>{x, v_scalar}));
  });
}
