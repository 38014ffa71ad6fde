#pragma once
/// Elementwise ops with NumPy broadcasting. Every floating op here is differentiable.
#include <tapegrad/export.h>
#include <optional>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

// ---- arithmetic (both operands must have the same dtype; shapes broadcast) ----
Tensor neg(const Tensor& x);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
/// b - a.
Tensor rsub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
/// b / a.
Tensor rdiv(const Tensor& a, double b);

// ---- unary math ----
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
/// x^exponent for a scalar exponent (NaN for a negative base and a non-integer exponent, as std::pow).
Tensor pow(const Tensor& x, double exponent);
Tensor sqrt(const Tensor& x);
/// x * x.
Tensor square(const Tensor& x);
/// 1 / x.
Tensor reciprocal(const Tensor& x);
/// |x|; its gradient at 0 is 0 (sign(0) = 0), as PyTorch.
Tensor abs(const Tensor& x);
/// -1, 0 or 1 per element. Not differentiable: the result never requires grad (PyTorch's gradient is 0 anyway).
Tensor sign(const Tensor& x);
/// The Gauss error function.
Tensor erf(const Tensor& x);
/// Limits values to [min, max]; either bound may be absent. The gradient passes where min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
/// clamp in place, as libtorch's torch::clamp_ (recorded: see Tensor's in-place ops).
Tensor& clamp_(Tensor& x, std::optional<double> min, std::optional<double> max);

// ---- operators ----
// Note: a number operand is a Scalar, which remembers whether it was written as an integer, so that an int64
// tensor follows PyTorch's promotion through the Scalar methods (`labels + 1` stays int64, `labels * 0.5` is
// float32, `/` is true division); a floating tensor takes the same functions as before.
inline Tensor operator-(const Tensor& x) { return x.dtype() == DType::Int64 ? x.mul(Scalar(-1)) : neg(x); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return a.dtype() == DType::Int64 ? a.add(b) : add(a, b.to_double()); }
inline Tensor operator-(const Tensor& a, Scalar b) { return a.dtype() == DType::Int64 ? a.sub(b) : sub(a, b.to_double()); }
inline Tensor operator*(const Tensor& a, Scalar b) { return a.dtype() == DType::Int64 ? a.mul(b) : mul(a, b.to_double()); }
inline Tensor operator/(const Tensor& a, Scalar b) { return a.dtype() == DType::Int64 ? a.div(b) : div(a, b.to_double()); }
inline Tensor operator+(Scalar a, const Tensor& b) { return b + a; }
inline Tensor operator-(Scalar a, const Tensor& b) {
  return b.dtype() == DType::Int64 ? b.mul(Scalar(-1)).add(a) : rsub(b, a.to_double());
}
inline Tensor operator*(Scalar a, const Tensor& b) { return b * a; }
inline Tensor operator/(Scalar a, const Tensor& b) {
  return rdiv(b.dtype() == DType::Int64 ? b.to(DType::Float32) : b, a.to_double());
}

}  // namespace tapegrad

TAPEGRAD_API_END
