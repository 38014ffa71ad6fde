// The Tensor handle: its accessors, autograd identity and buffer flag.
// Note: Tensor's methods that compute (to, clone, reshape, the in-place updates) are ops: they record on the
// tape or consult grad mode, which sit above this file, so they are defined in ops/tensor_methods.cpp.
#include <tapegrad/framework/tensor.h>

#include <algorithm>
#include <type_traits>

#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/plane_transpose.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

namespace detail {
namespace {
// Note: initial-exec TLS: read by every tensor factory; the general-dynamic model of a shared library would cost
// a __tls_get_addr call each time. One byte of static TLS.
[[gnu::tls_model("initial-exec")]] thread_local bool inference_mode = false;
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

bool is_contiguous_layout(const Shape& shape, const Shape& strides) {
  if (strides.size() != shape.size()) return true;
  // As PyTorch: a tensor with no elements is contiguous whatever its strides (an empty channels-last one too).
  for (std::int64_t extent : shape)
    if (extent == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

void TensorImpl::set_layout(Shape new_shape, Shape new_strides, std::int64_t new_offset) {
  shape = std::move(new_shape);
  strides = std::move(new_strides);
  offset = new_offset;
  numel = shape_numel(shape);
  contiguous = is_contiguous_layout(shape, strides);
}

namespace detail {

Tensor make_view(const Tensor& x, Shape shape, Shape strides, std::int64_t offset) {
  const TensorImpl& from = *x.impl();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = from.storage;
  impl->dtype = from.dtype;
  impl->is_inference = from.is_inference;
  std::shared_ptr<TensorImpl> root = from.base.lock();
  if (!root) root = x.impl();
  impl->base = root;
  // Until a view op records it (record_op then tracks it), a view of a base that requires grad is untracked.
  if (root->autograd || root->untracked_view)
    impl->untracked_view = true;
  else
    impl->tracked_base = root;
  impl->history = root->history;
  impl->set_layout(std::move(shape), std::move(strides), offset);
  return Tensor(impl);
}

Tensor contiguous_values(const Tensor& t) {
  if (!t.defined() || t.impl()->contiguous) return t;
  const TensorImpl& from = *t.impl();
  Tensor out = empty(from.shape, from.dtype);
  // A dense channels-last tensor (the common case: a channels-last map handed to a row-major op) converts as a
  // transpose of each sample's [H*W, C] plane (detail/plane_transpose.h says why).
  const bool dense_nhwc = is_channels_last_layout(from.shape, from.strides);
  dispatch_moves(from.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(from.storage->data());
    T* dst = out.data<T>();
    if (dense_nhwc) {
      const Shape& s = from.shape;
      return transpose_planes(src + from.offset, dst, s[0], s[2] * s[3], s[1]);
    }
    for_each_run(from.shape, from.strides, from.offset,
                 [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                   for (std::int64_t k = 0; k < inner; ++k) dst[o + k] = src[s + k * step];
                 });
  });
  return out;
}

void write_strided(const Tensor& dst, const Tensor& src) {
  const TensorImpl& to = *dst.impl();
  dispatch_moves(to.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* from = src.data<T>();
    T* base = static_cast<T*>(to.storage->data());
    for_each_run(to.shape, to.strides, to.offset,
                 [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                   for (std::int64_t k = 0; k < inner; ++k) base[s + k * step] = from[o + k];
                 });
  });
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
// Note: normalize_dim lets a 0-d tensor take dim 0 or -1 (reductions treat it as [1], as PyTorch); size and
// stride must not, since a 0-d tensor has no entry to read (PyTorch: "dimension specified as 0 but tensor has
// no dimensions").
static void check_has_dims(const Tensor& t, std::int64_t d, const char* op) {
  if (t.dim() == 0) fail("{}: dimension specified as {} but the tensor has no dimensions (shape [])", op, d);
}
std::int64_t Tensor::size(std::int64_t d) const {
  check_has_dims(*this, d, "size");
  return shape()[normalize_dim(d, dim(), "size")];
}
std::int64_t Tensor::numel() const {
  check_defined("numel");
  return impl_->numel;
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}

namespace {
[[noreturn]] void fail_not_contiguous(const TensorImpl& impl, const char* op) {
  fail("{}: the tensor of shape {} is a non-contiguous view (strides {}, storage offset {}); its elements are "
       "not in row-major order. Call contiguous() first (ops do this at entry)",
       op, shape_string(impl.shape), shape_string(impl.strides), impl.offset);
}
}  // namespace

template <class T>
T* Tensor::data() {
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  if (!impl_->contiguous) fail_not_contiguous(*impl_, "data");
  return static_cast<T*>(impl_->storage->data()) + impl_->offset;
}
template <class T>
const T* Tensor::data() const {
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  if (!impl_->contiguous) fail_not_contiguous(*impl_, "data");
  return static_cast<const T*>(impl_->storage->data()) + impl_->offset;
}
template float* Tensor::data<float>();
template double* Tensor::data<double>();
template std::int64_t* Tensor::data<std::int64_t>();
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const std::int64_t* Tensor::data<std::int64_t>() const;
template BFloat16* Tensor::data<BFloat16>();
template const BFloat16* Tensor::data<BFloat16>() const;

void* Tensor::raw_data() {
  check_defined("raw_data");
  if (!impl_->contiguous) fail_not_contiguous(*impl_, "raw_data");
  return static_cast<unsigned char*>(impl_->storage->data()) +
         static_cast<std::size_t>(impl_->offset) * element_size(impl_->dtype);
}
const void* Tensor::raw_data() const {
  check_defined("raw_data");
  if (!impl_->contiguous) fail_not_contiguous(*impl_, "raw_data");
  return static_cast<const unsigned char*>(impl_->storage->data()) +
         static_cast<std::size_t>(impl_->offset) * element_size(impl_->dtype);
}

bool Tensor::is_contiguous() const {
  check_defined("is_contiguous");
  return impl_->contiguous;
}
Shape Tensor::strides() const {
  check_defined("strides");
  return impl_->strides.size() == impl_->shape.size() ? impl_->strides : contiguous_strides(impl_->shape);
}
std::int64_t Tensor::stride(std::int64_t d) const {
  check_has_dims(*this, d, "stride");
  return strides()[normalize_dim(d, dim(), "stride")];
}
std::int64_t Tensor::storage_offset() const {
  check_defined("storage_offset");
  return impl_->offset;
}

namespace {
// The element at storage position `at` (offset and strides already applied).
double element_as_double(const TensorImpl& impl, std::int64_t at) {
  return detail::dispatch_moves(impl.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T value = static_cast<const T*>(impl.storage->data())[at];
    if constexpr (std::is_same_v<T, BFloat16>)
      return static_cast<double>(bfloat16_to_float(value));
    else
      return static_cast<double>(value);
  });
}
}  // namespace

double Tensor::item() const {
  if (numel() != 1) fail("item: expected a one-element tensor, got shape {}", shape_string(shape()));
  return element_as_double(*impl_, impl_->offset);
}

double Tensor::at(std::initializer_list<std::int64_t> index) const {
  if (static_cast<std::int64_t>(index.size()) != dim())
    fail("at: {} indices for a tensor of shape {}", index.size(), shape_string(shape()));
  const Shape strides = this->strides();
  std::int64_t flat = impl_->offset, d = 0;
  for (std::int64_t i : index) {
    const std::int64_t extent = shape()[d];
    if (i < -extent || i >= extent) fail("at: index {} out of range for dim {} of shape {}", i, d, shape_string(shape()));
    flat += (i < 0 ? i + extent : i) * strides[d];
    ++d;
  }
  return element_as_double(*impl_, flat);
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> values(static_cast<std::size_t>(numel()));
  detail::dispatch_moves(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor values_in_order = detail::contiguous_values(*this);
    const T* p = values_in_order.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>)
        values[i] = static_cast<double>(bfloat16_to_float(p[i]));
      else
        values[i] = static_cast<double>(p[i]);
    }
  });
  return values;
}

// Note: Tensor::detach() is defined in ops/tensor_methods.cpp: it reports to the ONNX exporter's tracer (autograd
// level), which this file sits below.

// ---- autograd accessors ----
// Note: requires_grad() is defined in ops/inplace.cpp: reading a view whose base's history was rewritten by an
// in-place op first gives the view a new autograd identity, which records on the tape.

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

bool Tensor::is_leaf() const { return !requires_grad() || impl_->autograd->is_leaf; }

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
  impl_->dtype = source.impl_->dtype;
  impl_->set_layout(source.impl_->shape, source.impl_->strides, source.impl_->offset);
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
