// The Tensor handle: its accessors, autograd identity and buffer flag.
// Note: Tensor's methods that compute (to, clone, reshape, the in-place updates) are ops: they record on the
// tape or consult grad mode, which sit above this file, so they are defined in ops/tensor_methods.cpp.
#include <tapegrad/framework/tensor.h>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

namespace detail {
namespace {
thread_local bool inference_mode = false;
}
bool inference_mode_enabled() { return inference_mode; }
void set_inference_mode_enabled(bool enabled) { inference_mode = enabled; }

void check_not_inference(const Tensor& t, const char* op, const char* use) {
  if (t.defined() && t.impl()->is_inference)
    fail("{}: an inference tensor (shape {}, created under InferenceMode) cannot {}; autograd cannot track "
         "it. Make a normal copy with clone() outside InferenceMode, or run this under InferenceMode or "
         "NoGradGuard",
         op, shape_string(t.shape()), use);
}
}  // namespace detail

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

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = nullptr;
  impl->is_buffer = false;
  return Tensor(impl);
}

// ---- autograd accessors ----
bool Tensor::requires_grad() const { return impl_ && impl_->autograd != nullptr; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  check_defined("requires_grad_");
  if (requires_grad) {
    detail::check_not_inference(*this, "requires_grad_", "require grad");
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

bool Tensor::is_inference() const { return impl_ && impl_->is_inference; }

void Tensor::mark_as_buffer() {
  check_defined("mark_as_buffer");
  if (requires_grad()) fail("register_buffer: a buffer must not require grad (shape {})", shape_string(shape()));
  impl_->is_buffer = true;
}

}  // namespace tapegrad
