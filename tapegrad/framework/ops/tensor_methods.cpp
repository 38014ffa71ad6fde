// Tensor's methods that compute: the differentiable conversions (to, clone, reshape), each forward with its
// backward below it (the in-place updates are in ops/inplace_ops.cpp), and detach(). Defined here, among the ops,
// because they use the tape, grad mode or the exporter's tracer; tensor.cpp (the handle itself) sits below them.
#include <cstring>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/kernels/bfloat16_convert.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/ops/split.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

// ---- detach (not recorded; reported to the exporter's tracer) ----

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = nullptr;
  impl->is_buffer = false;
  impl->base.reset();  // as in PyTorch, writing through a detached handle is allowed
  impl->tracked_base.reset();
  impl->untracked_view = false;
  impl->history = 0;
  Tensor out(impl);
  // Note: the ONNX exporter must see that the result is its input's values (an Identity), or it takes it for a
  // constant made during the forward and freezes the example's values into the file.
  if (trace::active()) trace::report("detach", {*this}, {out});
  return out;
}

// ---- conversions and views (recorded) ----

namespace {
// The contiguous `values` in dtype `target` (not recorded). bfloat16 goes through float, as in torch (c10::BFloat16
// is built from and read as a float): double and int64 round twice on the way in, and int64 truncates on the way
// out, exactly as PyTorch's `.to(torch.bfloat16)` and back.
Tensor convert_values(const Tensor& values, DType target) {
  const DType source = values.dtype();
  const std::int64_t n = values.numel();
  if (target == DType::BFloat16) {
    const Tensor wide = source == DType::Float32 ? values : convert_values(values, DType::Float32);
    Tensor out = empty(values.shape(), target);
    kernels::float_to_bfloat16(wide.data<float>(), reinterpret_cast<std::uint16_t*>(out.data<BFloat16>()), n);
    return out;
  }
  if (source == DType::BFloat16) {
    Tensor wide = empty(values.shape(), DType::Float32);
    kernels::bfloat16_to_float(reinterpret_cast<const std::uint16_t*>(values.data<BFloat16>()), wide.data<float>(), n);
    return target == DType::Float32 ? wide : convert_values(wide, target);
  }
  Tensor out = empty(values.shape(), target);
  detail::dispatch_all(source, [&](auto from_tag) {
    using From = decltype(from_tag);
    detail::dispatch_all(target, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = values.data<From>();
      To* dst = out.data<To>();
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<To>(src[i]);
    });
  });
  return out;
}
}  // namespace

Tensor Tensor::to(DType target) const {
  check_defined("to");
  if (target == dtype()) return *this;
  const Tensor values = detail::contiguous_values(*this);
  Tensor out = convert_values(values, target);
  if (!is_floating(target) || !is_floating(dtype())) {
    if (trace::active()) trace::report("to", {*this}, {out});  // not recorded, but part of the computation
    return out;
  }
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

// The in-place updates (zero_, fill_, copy_, add_, sub_, mul_, div_, ...) are in ops/inplace_ops.cpp.

}  // namespace tapegrad
