// libtorch's method spellings of ops (x.sum(), x.eq(y), x.add(1), x[i], x.item<int64_t>()), and the int64
// tensor + Scalar rules they follow. Each method is the free function of the same name; what is here beyond
// forwarding is PyTorch's type promotion for an int64 tensor and a number, which depends on how the number
// was written (x * 2 stays int64, x * 2.0 becomes float32), hence Scalar.
#include <cmath>
#include <limits>
#include <type_traits>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/index.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

// ---- item<T> ----

namespace {

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, int>) return "int";
  else return "int64_t";
}

// Note: as c10's checked_convert (what libtorch's item<T>() uses): a value outside T's range is an error,
// not a wrapped or saturated number; a float converted to an integer is truncated toward zero.
template <class T, class From>
T checked_convert(From v, const Tensor& t) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_floating_point_v<From>) {
      if (!std::isfinite(v))
        fail("item<{}>: the value {} of a one-element {} tensor has no integer value", type_name<T>(), v,
             dtype_name(t.dtype()));
      // 2^63 is exactly representable as a double; anything >= it (or < -2^63) does not fit an int64
      const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
      if (static_cast<double>(v) >= limit || static_cast<double>(v) < -limit)
        fail("item<{}>: value {} cannot be converted to type {} without overflow", type_name<T>(), v, type_name<T>());
    } else if (v < static_cast<From>(std::numeric_limits<T>::lowest()) || v > static_cast<From>(std::numeric_limits<T>::max())) {
      fail("item<{}>: value {} cannot be converted to type {} without overflow", type_name<T>(), v, type_name<T>());
    }
    return static_cast<T>(v);
  } else {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<From, double>)
      if (std::isfinite(v) && std::abs(v) > static_cast<double>(std::numeric_limits<float>::max()))
        fail("item<float>: value {} cannot be converted to type float without overflow", v);
    return static_cast<T>(v);
  }
}

}  // namespace

template <class T>
T Tensor::item() const {
  check_defined("item");
  if (numel() != 1)
    fail("item<{}>: a tensor with {} elements cannot be converted to a scalar (shape {})", type_name<T>(), numel(),
         shape_string(shape()));
  // Note: a bfloat16 reads as its exact float, then converts as a float32 tensor's element does.
  if (dtype() == DType::BFloat16) return detach().to(DType::Float32).item<T>();
  const Tensor one = detail::contiguous_values(*this);
  return detail::dispatch_all(dtype(), [&](auto tag) {
    using From = decltype(tag);
    return checked_convert<T>(one.data<From>()[0], *this);
  });
}

template bool Tensor::item<bool>() const;
template int Tensor::item<int>() const;
template long Tensor::item<long>() const;
template long long Tensor::item<long long>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;

// ---- indexing ----

Tensor Tensor::operator[](std::int64_t index) const {
  check_defined("operator[]");
  if (dim() == 0) fail("operator[]: cannot index a 0-dim tensor (use item())");
  return tapegrad::select(*this, 0, index);
}

Tensor Tensor::operator[](const Tensor& index) const {
  check_defined("operator[]");
  index.check_defined("operator[]");
  return tapegrad::index(*this, {indexing::TensorIndex(index)});
}

// ---- reductions ----

Tensor Tensor::sum() const { return tapegrad::sum(*this); }
Tensor Tensor::sum(const std::vector<std::int64_t>& dims, bool keepdim) const { return tapegrad::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return tapegrad::mean(*this); }
Tensor Tensor::mean(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return tapegrad::mean(*this, dims, keepdim);
}
Tensor Tensor::prod() const { return tapegrad::prod(*this); }
Tensor Tensor::prod(std::int64_t dim, bool keepdim) const { return tapegrad::prod(*this, dim, keepdim); }
Tensor Tensor::max() const { return tapegrad::max(*this); }
Tensor Tensor::min() const { return tapegrad::min(*this); }
Tensor Tensor::argmax() const { return tapegrad::argmax(*this); }
Tensor Tensor::argmax(std::int64_t dim, bool keepdim) const { return tapegrad::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin() const { return tapegrad::argmin(*this); }
Tensor Tensor::argmin(std::int64_t dim, bool keepdim) const { return tapegrad::argmin(*this, dim, keepdim); }
Tensor Tensor::count_nonzero() const { return tapegrad::count_nonzero(*this); }

// ---- comparisons ----

#define TAPEGRAD_COMPARISON_METHOD(name)                                                   \
  Tensor Tensor::name(const Tensor& other) const { return tapegrad::name(*this, other); } \
  Tensor Tensor::name(Scalar other) const { return tapegrad::name(*this, other.to_double()); }
TAPEGRAD_COMPARISON_METHOD(eq)
TAPEGRAD_COMPARISON_METHOD(ne)
TAPEGRAD_COMPARISON_METHOD(lt)
TAPEGRAD_COMPARISON_METHOD(le)
TAPEGRAD_COMPARISON_METHOD(gt)
TAPEGRAD_COMPARISON_METHOD(ge)
#undef TAPEGRAD_COMPARISON_METHOD

// ---- arithmetic with a Scalar ----

namespace {

// Note: int64 results wrap modulo 2^64 as PyTorch's; uint64 arithmetic gives those bits without the
// undefined behaviour of signed overflow.
std::int64_t wrap(std::uint64_t v) { return static_cast<std::int64_t>(v); }

template <class F>
Tensor map_int64(const Tensor& x, F f) {
  const Tensor values = detail::contiguous_values(x);
  Tensor out = empty(x.shape(), DType::Int64);
  const std::int64_t* in = values.data<std::int64_t>();
  std::int64_t* o = out.data<std::int64_t>();
  for (std::int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = f(in[i]);
  return out;
}

std::int64_t int_pow(std::int64_t base, std::int64_t exponent) {
  std::uint64_t result = 1, b = static_cast<std::uint64_t>(base);
  for (auto e = static_cast<std::uint64_t>(exponent); e != 0; e >>= 1, b *= b)
    if (e & 1u) result *= b;
  return wrap(result);
}

// An int64 tensor meets a floating Scalar: PyTorch computes in the default float dtype, float32.
Tensor promoted(const Tensor& x) { return x.to(DType::Float32); }

bool is_int64(const Tensor& x) { return x.dtype() == DType::Int64; }

}  // namespace

Tensor Tensor::add(const Tensor& other) const { return tapegrad::add(*this, other); }
Tensor Tensor::sub(const Tensor& other) const { return tapegrad::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return tapegrad::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return tapegrad::div(*this, other); }

Tensor Tensor::add(Scalar other) const {
  check_defined("add");
  if (!is_int64(*this)) return tapegrad::add(*this, other.to_double());
  if (!other.is_integral()) return tapegrad::add(promoted(*this), other.to_double());
  const auto b = static_cast<std::uint64_t>(other.to_int64());
  return map_int64(*this, [b](std::int64_t v) { return wrap(static_cast<std::uint64_t>(v) + b); });
}

Tensor Tensor::sub(Scalar other) const {
  check_defined("sub");
  if (!is_int64(*this)) return tapegrad::sub(*this, other.to_double());
  if (!other.is_integral()) return tapegrad::sub(promoted(*this), other.to_double());
  const auto b = static_cast<std::uint64_t>(other.to_int64());
  return map_int64(*this, [b](std::int64_t v) { return wrap(static_cast<std::uint64_t>(v) - b); });
}

Tensor Tensor::mul(Scalar other) const {
  check_defined("mul");
  if (!is_int64(*this)) return tapegrad::mul(*this, other.to_double());
  if (!other.is_integral()) return tapegrad::mul(promoted(*this), other.to_double());
  const auto b = static_cast<std::uint64_t>(other.to_int64());
  return map_int64(*this, [b](std::int64_t v) { return wrap(static_cast<std::uint64_t>(v) * b); });
}

// Note: div is true division, as PyTorch's: an int64 tensor divided by anything gives float32.
Tensor Tensor::div(Scalar other) const {
  check_defined("div");
  return tapegrad::div(is_int64(*this) ? promoted(*this) : *this, other.to_double());
}

Tensor Tensor::pow(Scalar exponent) const {
  check_defined("pow");
  if (!is_int64(*this)) return tapegrad::pow(*this, exponent.to_double());
  if (!exponent.is_integral()) return tapegrad::pow(promoted(*this), exponent.to_double());
  const std::int64_t e = exponent.to_int64();
  if (e < 0)
    fail("pow: Integers to negative integer powers are not allowed (int64 tensor of shape {}, exponent {})",
         shape_string(shape()), e);
  return map_int64(*this, [e](std::int64_t v) { return int_pow(v, e); });
}

Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  check_defined("clamp");
  const auto as_double = [](const std::optional<Scalar>& s) {
    return s ? std::optional<double>(s->to_double()) : std::nullopt;
  };
  const bool integral = (!min || min->is_integral()) && (!max || max->is_integral());
  if (!is_int64(*this)) return tapegrad::clamp(*this, as_double(min), as_double(max));
  if (!integral) return tapegrad::clamp(promoted(*this), as_double(min), as_double(max));
  if (!min && !max) fail("clamp: at least one of 'min' or 'max' must not be None (shape {})", shape_string(shape()));
  // PyTorch's order: max(x, min) first, then min(that, max), so min > max gives max everywhere
  const std::int64_t lo = min ? min->to_int64() : std::numeric_limits<std::int64_t>::lowest();
  const std::int64_t hi = max ? max->to_int64() : std::numeric_limits<std::int64_t>::max();
  return map_int64(*this, [lo, hi](std::int64_t v) { return std::min(std::max(v, lo), hi); });
}

// Note: the result keeps this tensor's dtype whatever the value (PyTorch: an int64 tensor filled with 0.5
// holds 0), as masked_fill is an in-place op in disguise.
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return tapegrad::masked_fill(*this, mask, value.to_double());
}

}  // namespace tapegrad
