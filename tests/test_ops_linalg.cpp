// matmul and linear: closed forms, every torch.matmul rank case, gradients, second derivatives, errors.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

// Operand shapes for a random torch.matmul case: ranks 1 to max_rank, a shared inner extent, and batch
// dims taken from one random full batch shape with some extents turned into 1 (so they broadcast).
std::pair<Shape, Shape> gen_matmul_shapes(int max_rank = 4) {
  const auto n = *rc::gen::inRange<std::int64_t>(1, 4), k = *rc::gen::inRange<std::int64_t>(1, 4),
             m = *rc::gen::inRange<std::int64_t>(1, 4);
  const Shape full_batch = *gen::shape(2, 2, 1, 3);
  auto operand = [&](std::int64_t rows, std::int64_t cols) {
    // Note: inRange scales with RapidCheck's size; resize makes every rank equally likely from the first test.
    const int rank = *rc::gen::resize(100, rc::gen::inRange(1, max_rank + 1));
    if (rank == 1) return Shape{k};
    Shape s(full_batch.end() - (rank - 2), full_batch.end());
    for (auto& extent : s)
      if (*rc::gen::arbitrary<bool>()) extent = 1;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  Shape a = operand(n, k);
  Shape b = operand(k, m);
  return {a, b};
}

// matmul written out with loops over 2-D slices, the reference for the batched and vector cases.
Tensor reference_matmul_3d_2d(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> rows;
  for (std::int64_t i = 0; i < a.size(0); ++i) rows.push_back(matmul(slice(a, 0, i, i + 1).reshape({a.size(1), a.size(2)}), b));
  return stack(rows, 0);
}

}  // namespace

TEST_CASE("matmul of 2-D matrices is the textbook product") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64());
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2}, f64());
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 2});
  CHECK(c.to_vector() == std::vector<double>{58, 64, 139, 154});
}

TEST_CASE("matmul follows torch.matmul for vectors") {
  Tensor v = tensor({1, 2, 3}, {3}, f64());
  Tensor w = tensor({4, 5, 6}, {3}, f64());
  Tensor m = tensor({1, 0, 0, 1, 1, 1}, {3, 2}, f64());
  Tensor dot = matmul(v, w);
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item() == 32.0);
  Tensor row = matmul(v, m);  // [3] x [3, 2] -> [2]
  CHECK(row.shape() == Shape{2});
  CHECK(row.to_vector() == std::vector<double>{4, 5});
  Tensor column = matmul(transpose(m, 0, 1), v);  // [2, 3] x [3] -> [2]
  CHECK(column.shape() == Shape{2});
  CHECK(column.to_vector() == std::vector<double>{4, 5});
}

TEST_CASE("matmul batches and broadcasts the leading dims") {
  Generator generator(7);
  Tensor a = randn({2, 3, 4}, generator, f64());
  Tensor b = randn({4, 5}, generator, f64());
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 3, 5});
  CHECK(allclose(c, reference_matmul_3d_2d(a, b)));

  Tensor bb = randn({2, 4, 5}, generator, f64());
  Tensor batched = matmul(a, bb);
  CHECK(batched.shape() == Shape{2, 3, 5});
  for (std::int64_t i = 0; i < 2; ++i)
    CHECK(allclose(slice(batched, 0, i, i + 1).reshape({3, 5}),
                   matmul(slice(a, 0, i, i + 1).reshape({3, 4}), slice(bb, 0, i, i + 1).reshape({4, 5}))));

  CHECK(matmul(randn({5, 1, 3, 4}, generator, f64()), randn({2, 4, 6}, generator, f64())).shape() == Shape{5, 2, 3, 6});
  CHECK(matmul(randn({3, 4}, generator, f64()), randn({2, 4, 6}, generator, f64())).shape() == Shape{2, 3, 6});
  CHECK(matmul(randn({4}, generator, f64()), randn({2, 4, 6}, generator, f64())).shape() == Shape{2, 6});
  CHECK(matmul(randn({2, 3, 4}, generator, f64()), randn({4}, generator, f64())).shape() == Shape{2, 3});
}

TEST_CASE("matmul with an empty inner dim gives zeros") {
  Tensor c = matmul(zeros({2, 0}, f64()), zeros({0, 3}, f64()));
  CHECK(c.shape() == Shape{2, 3});
  CHECK(c.to_vector() == std::vector<double>(6, 0.0));
}

TEST_CASE("matmul works in float32") {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2});
  Tensor c = matmul(a, a);
  CHECK(c.dtype() == DType::Float32);
  CHECK(c.to_vector() == std::vector<double>{7, 10, 15, 22});
}

TEST_CASE("matmul reports shapes that cannot be multiplied") {
  CHECK_THROWS_WITH(matmul(zeros({3, 4}), zeros({5, 6})), "matmul: shapes [3, 4] and [5, 6] cannot be multiplied (4 != 5)");
  CHECK_THROWS_WITH(matmul(zeros({3}), zeros({4})), "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  CHECK_THROWS_WITH(matmul(zeros({2, 3, 4}), zeros({3, 3, 4, 2})),
                    "matmul: batch dims of [2, 3, 4] and [3, 3, 4, 2] cannot be broadcast ([2] vs [3, 3])");
  CHECK_THROWS_WITH(matmul(scalar_tensor(1.0), zeros({3})), Catch::Contains("matmul: both arguments need at least 1 dim"));
  CHECK_THROWS_WITH(matmul(zeros({2, 2}), zeros({2, 2}, f64())), Catch::Contains("matmul: dtype mismatch"));
  CHECK_THROWS_WITH(matmul(zeros({2, 2}, TensorOptions{}.with_dtype(DType::Int64)), zeros({2, 2}, TensorOptions{}.with_dtype(DType::Int64))),
                    Catch::Contains("matmul: expected a float32 or float64 tensor"));
}

TEST_CASE("d(sum(A B))/dA is the row sums of B broadcast") {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}, f64().with_requires_grad());
  Tensor b = tensor({1, 2, 3, 4}, {2, 2}, f64().with_requires_grad());
  sum(matmul(a, b)).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{3, 7, 3, 7});  // dA = 1 B^T
  CHECK(b.grad().to_vector() == std::vector<double>{4, 4, 6, 6});  // dB = A^T 1
}

TEST_CASE("matmul gradients are right for every rank combination") {
  rc::prop("1-D to 4-D operands with broadcast batches", [] {
    const auto shapes = gen_matmul_shapes();
    const Tensor a = *gen::tensor_of_shape(shapes.first), b = *gen::tensor_of_shape(shapes.second);
    RC_TAG(a.dim(), b.dim());
    TAPEGRAD_RC_GRADCHECK([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, (std::vector<Tensor>{a, b}));
  });
}

TEST_CASE("matmul second derivatives are right") {
  rc::prop("1-D to 3-D operands", [] {
    const auto shapes = gen_matmul_shapes(3);
    const Tensor a = *gen::tensor_of_shape(shapes.first), b = *gen::tensor_of_shape(shapes.second);
    // Squaring makes the second derivative depend on both operands, not only on the upstream gradient.
    TAPEGRAD_RC_GRADGRADCHECK(
        [](const std::vector<Tensor>& x) {
          Tensor y = matmul(x[0], x[1]);
          return y * y;
        },
        (std::vector<Tensor>{a, b}));
  });
}

TEST_CASE("the first-order and create_graph backward paths of matmul agree") {
  rc::prop("same gradients either way", [] {
    const auto shapes = gen_matmul_shapes();
    Tensor a = (*gen::tensor_of_shape(shapes.first)).requires_grad_();
    Tensor b = (*gen::tensor_of_shape(shapes.second)).requires_grad_();
    Tensor y = matmul(a, b);
    Tensor upstream = *gen::tensor_of_shape(y.shape());
    auto raw = autograd::grad({y}, {a, b}, {upstream}, /*retain_graph=*/true, /*create_graph=*/false);
    auto composed = autograd::grad({y}, {a, b}, {upstream}, false, /*create_graph=*/true);
    RC_ASSERT(allclose(raw[0], composed[0]));
    RC_ASSERT(allclose(raw[1], composed[1]));
  });
}

TEST_CASE("linear is x W^T + b") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64());
  Tensor w = tensor({1, 0, -1, 2, 1, 0}, {2, 3}, f64());
  Tensor b = tensor({10, 20}, {2}, f64());
  Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape{2, 2});
  CHECK(y.to_vector() == std::vector<double>{8, 24, 8, 33});
  CHECK(linear(x, w).to_vector() == std::vector<double>{-2, 4, -2, 13});
}

TEST_CASE("linear accepts any number of leading dims, like torch.nn.functional.linear") {
  Generator generator(3);
  Tensor x = randn({2, 3, 4}, generator, f64());
  Tensor w = randn({5, 4}, generator, f64());
  Tensor b = randn({5}, generator, f64());
  Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape{2, 3, 5});
  CHECK(allclose(y, matmul(x, transpose(w, 0, 1)) + b));
  CHECK(linear(randn({4}, generator, f64()), w).shape() == Shape{5});
}

TEST_CASE("linear reports bad shapes") {
  CHECK_THROWS_WITH(linear(zeros({3, 4}), zeros({2, 5})), "linear: input [3, 4] and weight [2, 5] cannot be multiplied (4 != 5)");
  CHECK_THROWS_WITH(linear(zeros({3, 4}), zeros({4})), "linear: weight must be 2-D [out, in], got [4]");
  CHECK_THROWS_WITH(linear(zeros({3, 4}), zeros({2, 4}), zeros({3})),
                    "linear: bias must be a float32 tensor of shape [2], got float32 [3]");
  CHECK_THROWS_WITH(linear(zeros({3, 4}), zeros({2, 4}, f64())), Catch::Contains("linear: dtype mismatch"));
}

TEST_CASE("linear gradients are right") {
  rc::prop("1-D to 3-D input, with and without bias", [] {
    const auto in = *rc::gen::inRange<std::int64_t>(1, 5), out = *rc::gen::inRange<std::int64_t>(1, 5);
    Shape xs = *gen::shape(0, 2);
    xs.push_back(in);
    const bool with_bias = *rc::gen::arbitrary<bool>();
    std::vector<Tensor> inputs{*gen::tensor_of_shape(xs), *gen::tensor_of_shape({out, in})};
    if (with_bias) inputs.push_back(*gen::tensor_of_shape({out}));
    TAPEGRAD_RC_GRADCHECK(
        [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); }, inputs);
  });
}

TEST_CASE("linear second derivatives are right") {
  rc::prop("through a squared output", [] {
    const auto in = *rc::gen::inRange<std::int64_t>(1, 4), out = *rc::gen::inRange<std::int64_t>(1, 4);
    Shape xs = *gen::shape(0, 2, 1, 3);
    xs.push_back(in);
    std::vector<Tensor> inputs{*gen::tensor_of_shape(xs), *gen::tensor_of_shape({out, in}), *gen::tensor_of_shape({out})};
    TAPEGRAD_RC_GRADGRADCHECK(
        [](const std::vector<Tensor>& x) {
          Tensor y = linear(x[0], x[1], x[2]);
          return y * y;
        },
        inputs);
  });
}

TEST_CASE("the first-order and create_graph backward paths of linear agree") {
  rc::prop("same gradients either way", [] {
    const auto in = *rc::gen::inRange<std::int64_t>(1, 5), out = *rc::gen::inRange<std::int64_t>(1, 5);
    Shape xs = *gen::shape(0, 2);
    xs.push_back(in);
    Tensor x = (*gen::tensor_of_shape(xs)).requires_grad_();
    Tensor w = (*gen::tensor_of_shape({out, in})).requires_grad_();
    Tensor b = (*gen::tensor_of_shape({out})).requires_grad_();
    Tensor y = linear(x, w, b);
    Tensor upstream = *gen::tensor_of_shape(y.shape());
    auto raw = autograd::grad({y}, {x, w, b}, {upstream}, /*retain_graph=*/true, /*create_graph=*/false);
    auto composed = autograd::grad({y}, {x, w, b}, {upstream}, false, /*create_graph=*/true);
    for (std::size_t i = 0; i < 3; ++i) RC_ASSERT(allclose(raw[i], composed[i]));
  });
}

TEST_CASE("linear records one tape entry and nothing without grad") {
  Tensor x = ones({2, 3}, f64().with_requires_grad());
  Tensor w = ones({4, 3}, f64().with_requires_grad());
  const auto before = tape_size();
  Tensor y = linear(x, w, zeros({4}, f64()));
  CHECK(tape_size() == before + 1);
  CHECK(y.grad_fn_name() == "linear");
  NoGradGuard guard;
  linear(x, w);
  CHECK(tape_size() == before + 1);
}

TEST_CASE("thread count controls the kernels' OpenMP threads, and results do not depend on it") {
  const int original = get_num_threads();
  CHECK(original >= 1);
  Generator generator(11);
  // Note: 192 x 160 x 144 multiply-adds, above the size from which the float64 GEMM uses threads.
  Tensor a = randn({192, 160}, generator, f64()), b = randn({160, 144}, generator, f64());
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  Tensor single = matmul(a, b);
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  CHECK(identical(matmul(a, b), single));  // each element sums its products in one order at any thread count
  CHECK_THROWS_WITH(set_num_threads(0), "set_num_threads: expected at least 1 thread, got 0");
  set_num_threads(original);
}
