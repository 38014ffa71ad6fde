// Hostile shapes: element counts beyond int64, impossible allocations and zero-sized inner dims are each a
// clear tapegrad::Error or a correct (empty or zero) result; never a crash, a wrapped count or std::bad_alloc.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
constexpr std::int64_t kTwo31 = std::int64_t{1} << 31;
constexpr std::int64_t kTwo40 = std::int64_t{1} << 40;
constexpr std::int64_t kTwo62 = std::int64_t{1} << 62;
}  // namespace

TEST_CASE("factories refuse shapes whose element count overflows int64, naming the shape") {
  CHECK_THROWS_WITH(zeros({kTwo40, kTwo40}), Catch::Contains("[1099511627776, 1099511627776]"));
  CHECK_THROWS_AS(ones({kTwo62, 4}), Error);
  CHECK_THROWS_AS(zeros({kTwo31, kTwo31, kTwo31}), Error);
  CHECK_THROWS_AS(empty({kTwo62, 2}, DType::Float64), Error);
  CHECK_THROWS_AS(full({kTwo62, kTwo62}, 1.0), Error);
}

TEST_CASE("a shape whose bytes, not elements, overflow is refused") {
  // 2^62 elements fit int64; 2^62 * 8 bytes do not
  CHECK_THROWS_WITH(zeros({kTwo62}, TensorOptions{}.with_dtype(DType::Float64)), Catch::Contains("[4611686018427387904]"));
}

TEST_CASE("an impossible allocation is a tapegrad::Error naming the bytes and the shape") {
  try {
    (void)zeros({std::int64_t{1} << 42});  // 16 TiB of float32
    FAIL("a 16 TiB tensor was allocated");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("17592186044416 bytes") && Catch::Contains("[4398046511104]"));
  }
}

TEST_CASE("a zero extent beside huge ones is a legal empty tensor") {
  Tensor t = zeros({0, kTwo40, kTwo40});
  CHECK(t.numel() == 0);
  t.fill_(1.0);
  CHECK(sum(t).item() == 0.0);
  CHECK_THROWS_AS(t.reshape({kTwo62, kTwo62, -1}), Error);
}

TEST_CASE("reshape refuses a target whose count overflows instead of wrapping") {
  Tensor t = zeros({4});
  CHECK_THROWS_AS(t.reshape({kTwo62, 4}), Error);
  CHECK_THROWS_AS(t.reshape({kTwo62, kTwo62, -1}), Error);
  CHECK_THROWS_AS(t.reshape({-2, -2}), Error);
}

TEST_CASE("Linear with zero input features returns the bias, like PyTorch") {
  nn::Linear layer(0, 4);
  Tensor x = zeros({2, 0}, TensorOptions{}.with_requires_grad());
  Tensor y = layer.forward(x);
  REQUIRE(y.shape() == Shape{2, 4});
  const Tensor bias = layer.named_parameters().back().second;
  CHECK(testing::allclose(y, stack({bias, bias})));
  sum(y).backward();
  CHECK(x.grad().shape() == Shape{2, 0});
  CHECK(layer.named_parameters().back().second.grad().to_vector() == std::vector<double>{2, 2, 2, 2});
}

TEST_CASE("matmul with a zero inner dim gives zeros, batched or not, and differentiates") {
  const auto opts = TensorOptions{}.with_requires_grad();
  Tensor a = ones({3, 2, 0}, opts), b = ones({3, 0, 5}, opts);
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{3, 2, 5});
  CHECK(sum(abs(c)).item() == 0.0);
  sum(c).backward();
  CHECK(a.grad().shape() == Shape{3, 2, 0});
  CHECK(b.grad().shape() == Shape{3, 0, 5});
  Tensor folded = matmul(ones({3, 2, 0}), ones({0, 5}));  // a batch folded into the rows of one GEMM
  CHECK(folded.shape() == Shape{3, 2, 5});
  CHECK(sum(abs(folded)).item() == 0.0);
  CHECK(matmul(ones({0}), ones({0})).item() == 0.0);
}

TEST_CASE("linear over a zero-row batch is an empty result") {
  nn::Linear layer(3, 2);
  CHECK(layer.forward(zeros({0, 3})).shape() == Shape{0, 2});
}

TEST_CASE("narrow and slice with extreme lengths and steps neither overflow nor read outside the tensor") {
  Tensor t = arange(10);
  CHECK_THROWS_WITH(narrow(t, 0, 2, INT64_MAX), Catch::Contains("exceeds dimension size"));
  CHECK_THROWS_AS(narrow(t, 0, INT64_MAX, 1), Error);
  CHECK(slice(t, 0, 3, INT64_MAX, INT64_MAX).to_vector() == std::vector<double>{3});
  CHECK(slice(t, 0, INT64_MIN, INT64_MAX, 4).to_vector() == std::vector<double>{0, 4, 8});
  CHECK(slice(t, 0, 5, 5).numel() == 0);
}

TEST_CASE("arange refuses counts beyond 64 bits and non-finite bounds instead of converting them") {
  CHECK_THROWS_WITH(arange(0.0, 1e30), Catch::Contains("arange"));
  CHECK_THROWS_AS(arange(0.0, INFINITY), Error);
  CHECK_THROWS_AS(arange(NAN, 1.0), Error);
  CHECK(arange(0.0, 3.0).numel() == 3);
}

TEST_CASE("size and stride of a 0-d tensor are errors, not out-of-bounds reads") {
  const Tensor s = scalar_tensor(1.0);
  CHECK_THROWS_WITH(s.size(0), Catch::Contains("size: dimension specified as 0 but the tensor has no dimensions"));
  CHECK_THROWS_WITH(s.size(-1), Catch::Contains("no dimensions"));
  CHECK_THROWS_WITH(s.stride(0), Catch::Contains("stride: dimension specified as 0"));
  CHECK(sum(s, {0}).dim() == 0);  // reductions still accept dim 0 of a 0-d tensor, as PyTorch
}
