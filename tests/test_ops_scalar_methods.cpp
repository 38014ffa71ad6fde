// libtorch's method spellings (issue 39, item 6): t[i] and t[tensor], the Scalar-taking methods and PyTorch's
// type promotion for an int64 tensor and a number (int64 values against PyTorch 1.13 from
// tests/reference/make_integer_reference.py), and the float methods being the free functions they name.
#include <cstdint>
#include <map>
#include <string>

#include "support/error_of.h"
#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }
Tensor ints(std::vector<std::int64_t> values, const Shape& shape) { return from_vector(values, shape); }

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref = tapegrad::testing::load_reference_file("integer_reference.txt");
  return ref;
}

template <class F>
void check_case(const std::string& name, F op) {
  INFO(name);
  const Tensor in = tapegrad::testing::reference_entry(reference(), name + "/in").to(DType::Int64);
  const Tensor out = op(in);
  const Tensor& expected = tapegrad::testing::reference_entry(reference(), name + "/out");
  const auto dtype = static_cast<DType>(static_cast<int>(tapegrad::testing::reference_entry(reference(), name + "/dtype").item()));
  CHECK(dtype_name(out.dtype()) == dtype_name(dtype));
  if (out.dtype() == DType::Float32)
    CHECK(allclose(out.to(DType::Float64), expected, 1e-6, 0.0));  // pow(x, 0.5) may differ by an ulp
  else
    CHECK(identical(out.to(DType::Float64), expected));
}

}  // namespace

// ---- operator[] ----

TEST_CASE("t[i] is a view of row i sharing t's storage, as libtorch's select(0, i)") {
  Tensor t = arange(0.0, 6.0, 1.0, DType::Float64).reshape({2, 3});
  CHECK(identical(t[1], tensor({3.0, 4.0, 5.0}, {3}, f64())));
  CHECK(identical(t[-2], t[0]));
  CHECK(t[1][2].item<double>() == 5.0);
  CHECK(t[1][-1].dim() == 0);
  t[0].fill_(7.0);  // writes through the view into t
  CHECK(t.to_vector() == std::vector<double>{7, 7, 7, 3, 4, 5});
  t.t()[2].mul_(2.0);  // column 2 of t
  CHECK(t.to_vector() == std::vector<double>{7, 7, 14, 3, 4, 10});
  CHECK(identical(ints({1, 2, 3}, {3})[1], scalar_tensor(2.0, DType::Int64)));

  CHECK_THROWS_WITH(t[2], "select: index 2 is out of range for dim 0 of size 2 (tensor of shape [2, 3])");
  CHECK_THROWS_WITH(t[0][0][0], "operator[]: cannot index a 0-dim tensor (use item())");
  CHECK_THROWS_WITH(Tensor()[0], "operator[]: expected a defined tensor, got an undefined one");
}

TEST_CASE("t[tensor] is t.index({tensor}): int64 indices gather rows, a floating 0/1 tensor masks") {
  const Tensor t = arange(0.0, 6.0, 1.0, DType::Float64).reshape({3, 2});
  CHECK(identical(t[ints({2, 0, 2}, {3})], tensor({4, 5, 0, 1, 4, 5}, {3, 2}, f64())));
  CHECK(identical(t[ints({-1}, {1})], tensor({4, 5}, {1, 2}, f64())));
  CHECK(identical(t[tensor({1, 0, 1}, {3}, f64())], tensor({0, 1, 4, 5}, {2, 2}, f64())));
  // the trap the docs warn about: an int64 0/1 mask is read as indices
  const Tensor labels = ints({0, 1, 1}, {3});
  CHECK(t[labels.eq(1)].size(0) == 3);
  CHECK(identical(t.index({indexing::Mask(labels.eq(1))}), tensor({2, 3, 4, 5}, {2, 2}, f64())));
  CHECK_THROWS(t[ints({3}, {1})]);
  CHECK_THROWS_WITH(t[Tensor()], "operator[]: expected a defined tensor, got an undefined one");
}

TEST_CASE("t[i] and t[indices] gradients and second derivatives are right") {
  rc::prop("a random row, by integer and by index tensor", [] {
    const Tensor x = *gen::tensor_of_shape(*gen::shape(1, 3, 1, 4));
    const std::int64_t i = *rc::gen::inRange<std::int64_t>(-x.size(0), x.size(0));
    const Tensor rows = ints({i, 0, i}, {3});
    const TensorFunction f = [=](const std::vector<Tensor>& v) {
      const Tensor a = v[0][i], b = v[0][rows];
      return cat({(a * a).reshape({-1}), (b * b).reshape({-1})}, 0);
    };
    TAPEGRAD_RC_GRADCHECK(f, std::vector<Tensor>{x});
    TAPEGRAD_RC_GRADGRADCHECK(f, std::vector<Tensor>{x});
  });
}

// ---- Scalar methods on int64 tensors (PyTorch's promotion) ----

TEST_CASE("Scalar methods on int64 tensors follow PyTorch's promotion") {
  check_case("add_int", [](const Tensor& x) { return x.add(3); });
  check_case("sub_int", [](const Tensor& x) { return x.sub(std::int64_t{2}); });
  check_case("mul_int", [](const Tensor& x) { return x.mul(-3); });
  check_case("mul_float", [](const Tensor& x) { return x.mul(0.5); });
  check_case("add_float", [](const Tensor& x) { return x.add(0.25f); });
  check_case("div_int", [](const Tensor& x) { return x.div(2); });
  check_case("pow_2", [](const Tensor& x) { return x.pow(2); });
  check_case("pow_3", [](const Tensor& x) { return x.pow(3); });
  // PyTorch's case is x.abs().pow(0.5); int64 abs is not here, and (x^2)^0.25 is the same to an ulp
  check_case("pow_half", [](const Tensor& x) { return x.pow(2).pow(0.25); });
  check_case("clamp_int", [](const Tensor& x) { return x.clamp(0, 2); });
  check_case("clamp_float", [](const Tensor& x) { return x.clamp(-1.5, 2.5); });
  check_case("clamp_max", [](const Tensor& x) { return x.clamp(std::nullopt, 1); });
  check_case("clamp_crossed", [](const Tensor& x) { return x.clamp(3, 1); });
  check_case("masked_fill_half", [](const Tensor& x) { return x.masked_fill(x.gt(0), 0.5); });
  check_case("masked_fill_int", [](const Tensor& x) { return x.masked_fill(x.lt(0), 7); });
}

TEST_CASE("int64 Scalar arithmetic is exact past 2^53 and wraps as PyTorch's") {
  const std::int64_t big = (std::int64_t{1} << 62) + 1;
  CHECK(ints({big}, {1}).add(2).item<std::int64_t>() == big + 2);
  CHECK(ints({big}, {1}).mul(2).item<std::int64_t>() == -9223372036854775807 + 1);  // 2^63 + 2 wrapped, as PyTorch
  CHECK(ints({3}, {1}).pow(40).item<std::int64_t>() == -6289078614652622815);  // PyTorch's wrapped 3^40
  CHECK(ints({-2}, {1}).pow(0).item<std::int64_t>() == 1);
}

TEST_CASE("Scalar methods refuse what PyTorch refuses") {
  const Tensor x = ints({1, 2}, {2});
  CHECK_THROWS_WITH(x.pow(-1), "pow: Integers to negative integer powers are not allowed (int64 tensor of shape [2], exponent -1)");
  CHECK_THROWS_WITH(x.clamp(std::nullopt, std::nullopt), "clamp: at least one of 'min' or 'max' must not be None (shape [2])");
  CHECK_THROWS_WITH(x.add(x), "add: expected a float32 or float64 tensor, got int64");
  CHECK_THROWS_WITH(Tensor().mul(2), "mul: expected a defined tensor, got an undefined one");
}

// ---- the same methods on floating tensors are the free functions ----

TEST_CASE("on floating tensors the methods are the free functions, gradients included") {
  const Tensor x = tensor({-1.5, 0.25, 2.0, 7.0}, {2, 2}, f64()).requires_grad_();
  const Tensor y = tensor({0.5, 0.25, -1.0, 3.0}, {2, 2}, f64());
  CHECK(identical(x.add(1), add(x, 1.0)));
  CHECK(identical(x.sub(y), sub(x, y)));
  CHECK(identical(x.mul(0.5), mul(x, 0.5)));
  CHECK(identical(x.div(y), div(x, y)));
  CHECK(identical(x.pow(2), pow(x, 2.0)));
  CHECK(identical(x.clamp(0, 6), clamp(x, 0.0, 6.0)));
  CHECK(identical(x.masked_fill(y.gt(0), 0), masked_fill(x, gt(y, 0.0), 0.0)));
  CHECK(identical(x.eq(y), eq(x, y)));
  CHECK(identical(x.ge(0.25), ge(x, 0.25)));
  CHECK(identical(x.lt(y), lt(x, y)));
  CHECK(identical(x.le(y), le(x, y)));
  CHECK(identical(x.ne(2), ne(x, 2.0)));
  CHECK(identical(x.sum({1}, true), sum(x, {1}, true)));
  CHECK(identical(x.mean(), mean(x)));
  CHECK(identical(x.mean({0}), mean(x, {0})));
  CHECK(identical(x.max(), max(x)));
  CHECK(identical(x.min(), min(x)));
  CHECK(identical(x.prod(0), prod(x, 0)));
  CHECK(x.add(1).grad_fn_name() == "add");
  CHECK(x.clamp(0, 6).grad_fn_name() == "clamp");
  // x * 2 + x.pow(2) summed: d/dx = 2 + 2x
  const Tensor grad = autograd::grad({x.mul(2).add(x.pow(2)).sum()}, {x})[0];
  CHECK(allclose(grad, add(mul(x.detach(), 2.0), 2.0)));
  // float32 stays float32 with a double Scalar
  CHECK(ones({2}).mul(0.5).dtype() == DType::Float32);
}

TEST_CASE("the number operators on int64 tensors are the Scalar methods (PyTorch's promotion)") {
  const Tensor x = from_vector(std::vector<std::int64_t>{-3, 0, 2, 7}, {4});
  const auto values = [](const Tensor& t) { return t.to_vector(); };
  CHECK((x + 1).dtype() == DType::Int64);
  CHECK(values(x + 1) == std::vector<double>{-2, 1, 3, 8});
  CHECK(values(1 + x) == values(x + 1));
  CHECK((x - 2).dtype() == DType::Int64);
  CHECK(values(10 - x) == std::vector<double>{13, 10, 8, 3});
  CHECK((10 - x).dtype() == DType::Int64);
  CHECK((x * 2).dtype() == DType::Int64);
  CHECK(values(3 * x) == std::vector<double>{-9, 0, 6, 21});
  CHECK((x * 0.5).dtype() == DType::Float32);
  CHECK(values(x * 0.5) == std::vector<double>{-1.5, 0, 1, 3.5});
  CHECK((x / 2).dtype() == DType::Float32);  // true division, as PyTorch
  CHECK(values(x / 2) == std::vector<double>{-1.5, 0, 1, 3.5});
  CHECK(values(0.5 - x) == std::vector<double>{3.5, 0.5, -1.5, -6.5});
  CHECK((0.5 - x).dtype() == DType::Float32);
  const Tensor nonzero = from_vector(std::vector<std::int64_t>{-2, 1, 4}, {3});
  CHECK((2 / nonzero).dtype() == DType::Float32);
  CHECK(values(2 / nonzero) == std::vector<double>{-1, 2, 0.5});
  CHECK(values(-x) == std::vector<double>{3, 0, -2, -7});
  CHECK((-x).dtype() == DType::Int64);
  // Floating tensors: the operators still record the free functions' ops.
  const Tensor f = ones({2}, TensorOptions{}.with_requires_grad());
  CHECK((f * 2).grad_fn_name() == mul(f, 2.0).grad_fn_name());
  CHECK((1 - f).grad_fn_name() == rsub(f, 1.0).grad_fn_name());
}

TEST_CASE("assigning to a temporary view writes into its base, as libtorch's; a named handle rebinds") {
  Tensor t = zeros({3, 2}, TensorOptions{}.with_dtype(DType::Float64));
  t[1] = from_vector(std::vector<double>{4, 5}, {2});
  t.narrow(0, 2, 1) = 7.0;
  CHECK(t.to_vector() == std::vector<double>{0, 0, 4, 5, 7, 7});
  Tensor row = t[0];
  row = ones({2}, TensorOptions{}.with_dtype(DType::Float64));  // rebinds `row`, t is unchanged
  CHECK(t.to_vector() == std::vector<double>{0, 0, 4, 5, 7, 7});
  // Recorded like copy_ through a view: the gradient reaches the source and the base's other rows.
  const Tensor x = ones({3, 2}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  const Tensor source = full({2}, 3.0, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  Tensor y = x * 2.0;
  y[0] = source;
  sum(y * y).backward();
  CHECK(source.grad().to_vector() == std::vector<double>{6, 6});
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0, 8, 8, 8, 8});
}
