#include <tapegrad/framework/tensor.h>

#include <cstring>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

void Tensor::check_defined(const char* op) const {
  if (!impl_) fail("{}: expected a defined tensor, got an undefined one", op);
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
std::int64_t Tensor::dim() const { return static_cast<std::int64_t>(shape().size()); }
std::int64_t Tensor::size(std::int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
std::int64_t Tensor::numel() const {
  check_defined("numel");
  return impl_->numel;
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}

template <class T>
T* Tensor::data() {
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  return static_cast<T*>(impl_->storage->data());
}
template <class T>
const T* Tensor::data() const {
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  return static_cast<const T*>(impl_->storage->data());
}
template float* Tensor::data<float>();
template double* Tensor::data<double>();
template std::int64_t* Tensor::data<std::int64_t>();
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const std::int64_t* Tensor::data<std::int64_t>() const;

void* Tensor::raw_data() {
  check_defined("raw_data");
  return impl_->storage->data();
}
const void* Tensor::raw_data() const {
  check_defined("raw_data");
  return impl_->storage->data();
}

namespace {
double element_as_double(const Tensor& t, std::int64_t flat) {
  return detail::dispatch_all(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(t.data<T>()[flat]);
  });
}
}  // namespace

double Tensor::item() const {
  if (numel() != 1) fail("item: expected a one-element tensor, got shape {}", shape_string(shape()));
  return element_as_double(*this, 0);
}

double Tensor::at(std::initializer_list<std::int64_t> index) const {
  if (static_cast<std::int64_t>(index.size()) != dim())
    fail("at: {} indices for a tensor of shape {}", index.size(), shape_string(shape()));
  const Shape strides = contiguous_strides(shape());
  std::int64_t flat = 0, d = 0;
  for (std::int64_t i : index) {
    const std::int64_t extent = shape()[d];
    if (i < -extent || i >= extent) fail("at: index {} out of range for dim {} of shape {}", i, d, shape_string(shape()));
    flat += (i < 0 ? i + extent : i) * strides[d];
    ++d;
  }
  return element_as_double(*this, flat);
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> values(static_cast<std::size_t>(numel()));
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(p[i]);
  });
  return values;
}

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

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = nullptr;
  impl->is_buffer = false;
  return Tensor(impl);
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

// ---- autograd accessors ----
bool Tensor::requires_grad() const { return impl_ && impl_->autograd != nullptr; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  check_defined("requires_grad_");
  if (requires_grad) {
    if (impl_->is_buffer)
      fail("requires_grad_: tensor of shape {} is a module buffer; buffers are never differentiated (register it "
           "as a parameter instead)",
           shape_string(shape()));
    if (!is_floating(dtype()))
      fail("requires_grad_: only float32 and float64 tensors can require grad, got {}", dtype_name(dtype()));
    if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  } else {
    if (impl_->autograd && !impl_->autograd->is_leaf)
      fail("requires_grad_: cannot switch off requires_grad on the non-leaf output of '{}'; use detach()",
           impl_->autograd->grad_fn);
    impl_->autograd = nullptr;
  }
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || impl_->autograd->is_leaf; }

Tensor Tensor::grad() const {
  if (!requires_grad() || !impl_->autograd->is_leaf) return Tensor();
  return impl_->autograd->grad;
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (!requires_grad() || !impl_->autograd->is_leaf) fail("set_grad: only a leaf that requires grad has a .grad");
  if (grad.defined() && (grad.shape() != shape() || grad.dtype() != dtype()))
    fail("set_grad: gradient {} {} does not match tensor {} {}", shape_string(grad.shape()), dtype_name(grad.dtype()),
         shape_string(shape()), dtype_name(dtype()));
  impl_->autograd->grad = grad;
}

std::string Tensor::grad_fn_name() const {
  if (!requires_grad() || impl_->autograd->is_leaf) return "";
  return impl_->autograd->grad_fn;
}

std::uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage->version();
}

void Tensor::set_data(const Tensor& source) {
  check_defined("set_data");
  source.check_defined("set_data");
  if (source.impl_ == impl_) return;
  if (requires_grad() && !is_floating(source.dtype()))
    fail("set_data: a tensor that requires grad cannot take {} values", dtype_name(source.dtype()));
  impl_->storage = source.impl_->storage;
  impl_->shape = source.impl_->shape;
  impl_->numel = source.impl_->numel;
  impl_->dtype = source.impl_->dtype;
  if (impl_->autograd && impl_->autograd->grad.defined() &&
      (impl_->autograd->grad.shape() != impl_->shape || impl_->autograd->grad.dtype() != impl_->dtype))
    impl_->autograd->grad = Tensor();
}

bool Tensor::is_buffer() const { return impl_ && impl_->is_buffer; }

void Tensor::mark_as_buffer() {
  check_defined("mark_as_buffer");
  if (requires_grad()) fail("register_buffer: a buffer must not require grad (shape {})", shape_string(shape()));
  impl_->is_buffer = true;
}

// ---- in-place ----
namespace {
// Note: in-place ops are never recorded. Writing into a tensor that autograd tracks would silently
// corrupt gradients, so it is refused while grad mode is on; optimizers and buffer updates run under
// NoGradGuard, where it is allowed.
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
  impl_->storage->bump_version();
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
  impl_->storage->bump_version();
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
  impl_->storage->bump_version();
  return *this;
}

Tensor& Tensor::add_(double value) {
  check_in_place(*this, "add_");
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] + value);
  });
  impl_->storage->bump_version();
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
  impl_->storage->bump_version();
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_in_place(*this, "mul_");
  detail::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    for (std::int64_t i = 0, n = numel(); i < n; ++i) p[i] = static_cast<T>(p[i] * value);
  });
  impl_->storage->bump_version();
  return *this;
}

}  // namespace tapegrad
