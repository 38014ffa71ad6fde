// Tensor's methods that compute: the differentiable conversions (to, clone, reshape), each forward with its
// backward below it, and the in-place updates, which are never recorded and so are refused while autograd
// tracks the tensor. Defined here, among the ops, because they use the tape and grad mode; tensor.cpp (the
// handle itself) sits below both.
#include <cstring>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

// ---- conversions and views (recorded) ----

Tensor Tensor::to(DType target) const {
  check_defined("to");
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target);
  detail::dispatch_all(dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    detail::dispatch_all(target, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = data<From>();
      To* dst = out.data<To>();
      for (std::int64_t i = 0, n = numel(); i < n; ++i) dst[i] = static_cast<To>(src[i]);
    });
  });
  if (!is_floating(target) || !is_floating(dtype())) return out;
  const DType source = dtype();
  return record_if_needed("to", out, {*this}, [source] {
    return [source](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g.to(source)}; };
  });
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape(), dtype());
  std::memcpy(out.raw_data(), raw_data(), static_cast<std::size_t>(numel()) * element_size(dtype()));
  return record_if_needed("clone", out, {*this}, [] {
    return [](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g}; };
  });
}

Tensor Tensor::reshape(const Shape& requested) const {
  check_defined("reshape");
  Shape target = requested;
  std::int64_t known = 1, inferred = -1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferred >= 0) fail("reshape: only one dim can be -1, got {}", shape_string(requested));
      inferred = static_cast<std::int64_t>(i);
    } else if (target[i] < 0) {
      fail("reshape: invalid extent {} in {}", target[i], shape_string(requested));
    }
  }
  if (inferred >= 0) {  // the product of the given extents, overflow-checked (a zero among them makes it 0)
    Shape given = target;
    given[static_cast<std::size_t>(inferred)] = 1;
    known = checked_numel(given, "reshape");
    if (known == 0 || numel() % known != 0)
      fail("reshape: shape {} is invalid for input of shape {}", shape_string(requested), shape_string(shape()));
    target[inferred] = numel() / known;
  }
  if (checked_numel(target, "reshape") != numel())
    fail("reshape: shape {} is invalid for input of shape {} ({} elements)", shape_string(requested),
         shape_string(shape()), numel());
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = nullptr;
  impl->shape = target;
  Tensor out(impl);
  const Shape original = shape();
  return record_if_needed("reshape", out, {*this}, [original] {
    return [original](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g.reshape(original)}; };
  });
}

// ---- in-place ----
namespace {
// Note: in-place ops are never recorded. Writing into a tensor that autograd tracks would silently
// corrupt gradients, so it is refused while grad mode is on; optimizers and buffer updates run under
// NoGradGuard, where it is allowed.
// Note: inference tensors keep no version (nothing can have saved them), as in PyTorch.
void bump_version(TensorImpl& impl) {
  if (!impl.is_inference) impl.storage->bump_version();
}

void check_in_place(const Tensor& t, const char* op) {
  t.check_defined(op);
  if (t.requires_grad() && is_grad_enabled())
    fail("{}: tensor of shape {} requires grad; in-place changes are not recorded, so they are only allowed "
         "under NoGradGuard",
         op, shape_string(t.shape()));
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_in_place(*this, "fill_");
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
  });
  bump_version(*impl_);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& source) {
  check_in_place(*this, "copy_");
  source.check_defined("copy_");
  if (broadcast_shapes(shape(), source.shape(), "copy_") != shape())
    fail("copy_: source of shape {} cannot be broadcast to {}", shape_string(source.shape()), shape_string(shape()));
  const Tensor converted = source.detach().to(dtype());
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = data<T>();
    detail::broadcast_binary(out, shape(), converted.data<T>(), converted.shape(), out, shape(),
                             [](T, T s) { return s; });
  });
  bump_version(*impl_);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_in_place(*this, "add_");
  other.check_defined("add_");
  if (broadcast_shapes(shape(), other.shape(), "add_") != shape())
    fail("add_: shape {} cannot be broadcast to {}", shape_string(other.shape()), shape_string(shape()));
  if (other.dtype() != dtype())
    fail("add_: dtype mismatch, {} += {}", dtype_name(dtype()), dtype_name(other.dtype()));
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = data<T>();
    const T a = static_cast<T>(alpha);
    detail::broadcast_binary(out, shape(), other.data<T>(), other.shape(), out, shape(),
                             [a](T x, T y) { return x + a * y; });
  });
  bump_version(*impl_);
  return *this;
}

Tensor& Tensor::add_(double value) {
  check_in_place(*this, "add_");
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] + value);
  });
  bump_version(*impl_);
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_in_place(*this, "mul_");
  other.check_defined("mul_");
  if (broadcast_shapes(shape(), other.shape(), "mul_") != shape())
    fail("mul_: shape {} cannot be broadcast to {}", shape_string(other.shape()), shape_string(shape()));
  if (other.dtype() != dtype())
    fail("mul_: dtype mismatch, {} *= {}", dtype_name(dtype()), dtype_name(other.dtype()));
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = data<T>();
    detail::broadcast_binary(out, shape(), other.data<T>(), other.shape(), out, shape(),
                             [](T x, T y) { return x * y; });
  });
  bump_version(*impl_);
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_in_place(*this, "mul_");
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] * value);
  });
  bump_version(*impl_);
  return *this;
}

}  // namespace tapegrad
