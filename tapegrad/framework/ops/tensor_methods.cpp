// Tensor's methods that compute: the differentiable conversions (to, clone, reshape), each forward with its
// backward below it, and the in-place updates, which are never recorded and so are refused while autograd
// tracks the tensor. Defined here, among the ops, because they use the tape and grad mode; tensor.cpp (the
// handle itself) sits below both.
#include <cstring>
#include <type_traits>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/ops/split.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

// ---- conversions and views (recorded) ----

Tensor Tensor::to(DType target) const {
  check_defined("to");
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target);
  const Tensor values = detail::contiguous_values(*this);
  detail::dispatch_all(dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    detail::dispatch_all(target, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = values.data<From>();
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
  Tensor out;
  if (is_contiguous()) {
    out = empty(shape(), dtype());
    std::memcpy(out.raw_data(), raw_data(), static_cast<std::size_t>(numel()) * element_size(dtype()));
  } else {
    out = detail::contiguous_values(*this);
  }
  return record_if_needed("clone", out, {*this}, [] {
    return [](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g}; };
  });
}

// Note: an undefined tensor passes through, so ops can call contiguous() on optional inputs at entry.
Tensor Tensor::contiguous() const {
  if (!impl_ || impl_->contiguous) return *this;
  return record_if_needed("contiguous", detail::contiguous_values(*this), {*this}, [] {
    return [](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g}; };
  });
}

namespace {
// Strides for `target` over the same elements as (shape, strides), or false when no strides can express
// it without a copy (PyTorch's computeStride): each run of target dims must lie within one chunk of
// source dims that are contiguous with each other.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& target, Shape& out) {
  out.assign(target.size(), 0);
  if (shape_numel(shape) == 0) {
    out = contiguous_strides(target);
    return true;
  }
  std::int64_t view_d = static_cast<std::int64_t>(target.size()) - 1;
  std::int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[static_cast<std::size_t>(d)];
    if (d == 0 || (shape[static_cast<std::size_t>(d - 1)] != 1 &&
                   strides[static_cast<std::size_t>(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[static_cast<std::size_t>(view_d)] == 1)) {
        out[static_cast<std::size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= target[static_cast<std::size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[static_cast<std::size_t>(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// The requested shape with -1 resolved, checked against numel.
Shape resolve_shape(const Shape& requested, std::int64_t numel, const Shape& from, const char* op) {
  Shape target = requested;
  std::int64_t inferred = -1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferred >= 0) fail("{}: only one dim can be -1, got {}", op, shape_string(requested));
      inferred = static_cast<std::int64_t>(i);
    } else if (target[i] < 0) {
      fail("{}: invalid extent {} in {}", op, target[i], shape_string(requested));
    }
  }
  if (inferred >= 0) {  // the product of the given extents, overflow-checked (a zero among them makes it 0)
    Shape given = target;
    given[static_cast<std::size_t>(inferred)] = 1;
    const std::int64_t known = checked_numel(given, op);
    if (known == 0 || numel % known != 0)
      fail("{}: shape {} is invalid for input of shape {}", op, shape_string(requested), shape_string(from));
    target[static_cast<std::size_t>(inferred)] = numel / known;
  }
  if (checked_numel(target, op) != numel)
    fail("{}: shape {} is invalid for input of shape {} ({} elements)", op, shape_string(requested),
         shape_string(from), numel);
  return target;
}

Tensor record_reshape(const char* op, const Tensor& x, Tensor out) {
  return record_if_needed(op, std::move(out), {x}, [&] {
    return [original = x.shape()](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g.reshape(original)}; };
  });
}
}  // namespace

Tensor Tensor::reshape(const Shape& requested) const {
  check_defined("reshape");
  const Shape target = resolve_shape(requested, numel(), shape(), "reshape");
  Shape strides;  // stays empty (row-major) for a contiguous tensor
  if (!impl_->contiguous && !view_strides(shape(), impl_->strides, target, strides)) {
    Tensor copy = detail::contiguous_values(*this);
    copy.impl()->set_layout(target, {}, 0);
    return record_reshape("reshape", *this, copy);
  }
  return record_reshape("reshape", *this, detail::make_view(*this, target, strides, impl_->offset));
}

Tensor Tensor::view(const Shape& requested) const {
  check_defined("view");
  const Shape target = resolve_shape(requested, numel(), shape(), "view");
  Shape strides;  // stays empty (row-major) for a contiguous tensor
  if (!impl_->contiguous && !view_strides(shape(), impl_->strides, target, strides)) {
    fail("view: shape {} is not compatible with the input's shape {} and strides {} (at least one new dim "
         "spans elements that are not evenly spaced in memory); use reshape(), which copies then, or "
         "contiguous().view()",
         shape_string(requested), shape_string(shape()), shape_string(impl_->strides));
  }
  return record_reshape("view", *this, detail::make_view(*this, target, strides, impl_->offset));
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const { return tapegrad::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const { return tapegrad::permute(*this, dims); }
Tensor Tensor::t() const {
  check_defined("t");
  if (dim() > 2) fail("t: expects a tensor with at most 2 dims, got shape {}; use transpose()", shape_string(shape()));
  return tapegrad::transpose(*this, 0, dim() < 2 ? 0 : 1);
}
Tensor Tensor::narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const {
  return tapegrad::narrow(*this, dim, start, length);
}
Tensor Tensor::select(std::int64_t dim, std::int64_t index) const { return tapegrad::select(*this, dim, index); }
Tensor Tensor::slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) const {
  return tapegrad::slice(*this, dim, start, end, step);
}
Tensor Tensor::expand(const Shape& sizes) const { return tapegrad::expand(*this, sizes); }
Tensor Tensor::unsqueeze(std::int64_t dim) const { return tapegrad::unsqueeze(*this, dim); }
Tensor Tensor::squeeze() const { return tapegrad::squeeze(*this); }
Tensor Tensor::squeeze(std::int64_t dim) const { return tapegrad::squeeze(*this, dim); }
std::vector<Tensor> Tensor::split(std::int64_t split_size, std::int64_t dim) const {
  return tapegrad::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split(const std::vector<std::int64_t>& split_sizes, std::int64_t dim) const {
  return tapegrad::split(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::chunk(std::int64_t chunks, std::int64_t dim) const { return tapegrad::chunk(*this, chunks, dim); }
std::vector<Tensor> Tensor::unbind(std::int64_t dim) const { return tapegrad::unbind(*this, dim); }

// ---- in-place ----
namespace {
// Note: inference tensors keep no version (nothing can have saved them), as in PyTorch.
void bump_version(TensorImpl& impl) {
  if (!impl.is_inference) impl.storage->bump_version();
}

// Note: in-place ops are never recorded. Writing into a tensor that autograd tracks would silently
// corrupt gradients, so it is refused while grad mode is on; optimizers and buffer updates run under
// NoGradGuard, where it is allowed. A view writes into its base, so the same holds when the base requires
// grad (a view taken under NoGradGuard does not itself require grad).
void check_in_place(const Tensor& t, const char* op) {
  t.check_defined(op);
  if (!is_grad_enabled()) return;
  if (t.requires_grad())
    fail("{}: tensor of shape {} requires grad; in-place changes are not recorded, so they are only allowed "
         "under NoGradGuard",
         op, shape_string(t.shape()));
  const std::shared_ptr<TensorImpl> base = t.impl()->base.lock();
  if (base && base->autograd)
    fail("{}: tensor of shape {} is a view of a tensor of shape {} that requires grad; in-place changes are "
         "not recorded, so they are only allowed under NoGradGuard",
         op, shape_string(t.shape()), shape_string(base->shape));
}

// True when two elements of the view share one memory location (an expanded dim, stride 0).
bool overlaps(const TensorImpl& impl) {
  for (std::size_t d = 0; d < impl.shape.size(); ++d)
    if (impl.strides[d] == 0 && impl.shape[d] > 1) return true;
  return false;
}

// Runs `update(T* values)` over the tensor's elements in row-major order. A contiguous tensor (the
// common case) is updated where it lies; a strided view through a contiguous copy written back.
template <class Update>
void update_in_place(Tensor& self, const char* op, bool allow_overlap, Update update) {
  TensorImpl& impl = *self.impl();
  if (impl.contiguous) {
    detail::dispatch_all(impl.dtype, [&](auto tag) { update(self.data<decltype(tag)>()); });
  } else {
    if (!allow_overlap && overlaps(impl))
      fail("{}: more than one element of the written-to tensor (shape {}, strides {}) refers to a single memory "
           "location (an expanded view); clone() it before writing in place",
           op, shape_string(impl.shape), shape_string(impl.strides));
    Tensor values = detail::contiguous_values(self);
    detail::dispatch_all(impl.dtype, [&](auto tag) { update(values.data<decltype(tag)>()); });
    detail::write_strided(self, values);
  }
  bump_version(impl);
}

// `other` broadcast to `self`'s shape and converted to its dtype, contiguous, for reading.
void check_broadcast(const Tensor& self, const Tensor& other, const char* op) {
  other.check_defined(op);
  if (broadcast_shapes(self.shape(), other.shape(), op) != self.shape())
    fail("{}: shape {} cannot be broadcast to {}", op, shape_string(other.shape()), shape_string(self.shape()));
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_in_place(*this, "fill_");
  update_in_place(*this, "fill_", true, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
  });
  return *this;
}

Tensor& Tensor::copy_(const Tensor& source) {
  check_in_place(*this, "copy_");
  check_broadcast(*this, source, "copy_");
  const Tensor converted = detail::contiguous_values(source.detach().to(dtype()));
  update_in_place(*this, "copy_", false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    detail::broadcast_binary(out, shape(), converted.data<T>(), converted.shape(), out, shape(),
                             [](T, T s) { return s; });
  });
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_in_place(*this, "add_");
  check_broadcast(*this, other, "add_");
  if (other.dtype() != dtype())
    fail("add_: dtype mismatch, {} += {}", dtype_name(dtype()), dtype_name(other.dtype()));
  const Tensor values = detail::contiguous_values(other);
  update_in_place(*this, "add_", false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    const T a = static_cast<T>(alpha);
    detail::broadcast_binary(out, shape(), values.data<T>(), values.shape(), out, shape(),
                             [a](T x, T y) { return x + a * y; });
  });
  return *this;
}

Tensor& Tensor::add_(double value) {
  check_in_place(*this, "add_");
  update_in_place(*this, "add_", false, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] + value);
  });
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_in_place(*this, "mul_");
  check_broadcast(*this, other, "mul_");
  if (other.dtype() != dtype())
    fail("mul_: dtype mismatch, {} *= {}", dtype_name(dtype()), dtype_name(other.dtype()));
  const Tensor values = detail::contiguous_values(other);
  update_in_place(*this, "mul_", false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    detail::broadcast_binary(out, shape(), values.data<T>(), values.shape(), out, shape(),
                             [](T x, T y) { return x * y; });
  });
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_in_place(*this, "mul_");
  update_in_place(*this, "mul_", false, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] * value);
  });
  return *this;
}

}  // namespace tapegrad
