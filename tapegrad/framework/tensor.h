#pragma once
/// The N-d tensor handle: shape, dtype, shared contiguous storage, and its autograd identity.
#include <tapegrad/export.h>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/dtype.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/memory_format.h>
#include <tapegrad/framework/shape.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

class Storage;
struct TensorImpl;
struct AutogradMeta;
namespace indexing {
class TensorIndex;
}

/// A number given to an op, as libtorch's Scalar: it remembers whether it was written as an integer, because
/// that decides the dtype of the result on an int64 tensor (x.mul(2) stays int64, x.mul(2.0) is float32).
class Scalar {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T value)  // NOLINT(google-explicit-constructor): converts implicitly, as libtorch's
      : double_(static_cast<double>(value)), int64_(std::is_integral_v<T> ? static_cast<std::int64_t>(value) : 0),
        integral_(std::is_integral_v<T>) {}
  bool is_integral() const { return integral_; }
  double to_double() const { return double_; }
  /// The integer value (exact for any int64); only meaningful when is_integral().
  std::int64_t to_int64() const { return int64_; }

 private:
  double double_;
  std::int64_t int64_;
  bool integral_;
};

/// Note: a Tensor is a handle. Copying a Tensor copies the handle, so both names see the same values and
/// the same .grad (as in libtorch). Use clone() for an independent copy and detach() for a handle that
/// shares the values but not the autograd history. A tensor is storage + storage offset + sizes + strides
/// (in elements), as in PyTorch: transpose, permute, t, narrow, select, slice, expand, squeeze, unsqueeze,
/// view, integer/Slice index(), and reshape when the strides allow, return views that share the storage,
/// so an in-place op through a view changes its base and bumps the version counter they share. Ops read
/// non-contiguous inputs through contiguous() (matmul reads transposed and sliced matrices in place) and
/// always return fresh contiguous tensors; data<T>() and
/// raw_data() refuse a non-contiguous view. See docs/views_and_indexing.md.
class Tensor {
 public:
  /// An undefined tensor (no storage); defined() is false.
  Tensor() = default;
  /// Wraps an existing implementation (used by factories and ops).
  explicit Tensor(std::shared_ptr<TensorImpl> impl);
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  /// Assigning to a named tensor rebinds the handle (it then aliases `other`), as libtorch's.
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  /// Assigning to a temporary writes into it, as libtorch's: `t[0] = row` is `t[0].copy_(row)` and
  /// `t.narrow(0, 1, 2) = 0.5` is a fill_, both through the view into `t` (recorded by autograd like any in-place
  /// op). Without these, the assignment would rebind a temporary handle and change nothing.
  Tensor& operator=(const Tensor& source) && { return copy_(source); }
  Tensor& operator=(double value) && { return fill_(value); }

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const;
  /// Extent of dim `d` (negative counts from the end).
  std::int64_t size(std::int64_t d) const;
  std::int64_t numel() const;
  DType dtype() const;

  /// Typed pointer to the first element; throws when T does not match dtype() or the tensor is not contiguous.
  template <class T> T* data();
  template <class T> const T* data() const;
  /// Untyped pointer to the first element; throws when the tensor is not contiguous.
  void* raw_data();
  const void* raw_data() const;
  /// The same pointers for a tensor laid out in `format`: data<T>(MemoryFormat::ChannelsLast) is the dense NHWC
  /// buffer of a channels-last tensor. Throws naming the format and the strides when !is_contiguous(format).
  /// Note: data<T>() stays strictly row-major, so code written for NCHW never reads an NHWC buffer by mistake.
  template <class T> T* data(MemoryFormat format);
  template <class T> const T* data(MemoryFormat format) const;
  void* raw_data(MemoryFormat format);
  const void* raw_data(MemoryFormat format) const;

  // ---- layout ----
  /// True when the elements are in row-major order in memory (dims of extent 1 are ignored).
  bool is_contiguous() const;
  /// This tensor when contiguous; otherwise a contiguous copy of its values (differentiable).
  Tensor contiguous() const;
  /// libtorch's is_contiguous(memory_format): ChannelsLast is true for a 4-d tensor whose memory is the dense
  /// NHWC array (dims of extent 1 may have any stride, so some shapes are both); Preserve is refused.
  bool is_contiguous(MemoryFormat format) const;
  /// This tensor when is_contiguous(format); otherwise a copy laid out in `format` (differentiable; the
  /// gradient passes through unchanged). ChannelsLast needs a 4-d tensor; Preserve is refused.
  Tensor contiguous(MemoryFormat format) const;
  /// libtorch's rule: ChannelsLast when the strides of a 4-d tensor order its dims C, W, H, N from fastest to
  /// slowest (so also for a sliced channels-last tensor), with PyTorch's fallback to Contiguous on ambiguous
  /// size-1 layouts; otherwise Contiguous. See docs/channels_last.md.
  MemoryFormat suggest_memory_format() const;
  /// Steps in elements between neighbours along each dim (0 along an expanded dim).
  Shape strides() const;
  std::int64_t stride(std::int64_t d) const;
  /// Position of element (0, ..., 0) in the storage, in elements.
  std::int64_t storage_offset() const;

  /// The single value of a one-element tensor, as double.
  double item() const;
  /// The single value as T (bool, int, int64_t/long long, float or double), converted as libtorch's
  /// item<T>(): out of T's range (or NaN/inf to an integer) is an error; float to integer truncates.
  template <class T> T item() const;
  /// Element at a full index, as double (for tests and printing, not for kernels).
  double at(std::initializer_list<std::int64_t> index) const;
  /// All values, converted to double, in row-major order.
  std::vector<double> to_vector() const;

  /// A converted copy (or this handle when the dtype already matches). Differentiable between float types.
  Tensor to(DType dtype) const;
  /// An independent copy of the values; differentiable (gradient flows back to this tensor).
  Tensor clone() const;
  /// Shares the values, drops the autograd history; the result does not require grad.
  Tensor detach() const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as requiring grad. Only floating tensors can; non-leaves already track theirs.
  Tensor& requires_grad_(bool requires_grad = true);
  /// True for tensors not produced by a recorded op (parameters, inputs, anything detached).
  bool is_leaf() const;
  /// The accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  /// Replaces (or with an undefined tensor, clears) the accumulated gradient of a leaf.
  void set_grad(const Tensor& grad);
  /// Name of the op that produced this tensor ("" for leaves).
  std::string grad_fn_name() const;
  /// Backpropagates from this tensor. A scalar needs no `gradient`; a non-scalar needs one of its shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;

  // ---- in-place (ops/inplace_ops.cpp) ----
  // Note: each bumps the version counter. With grad mode on they are recorded as libtorch records them: on a
  // non-leaf (or a tensor that does not require grad, written with an operand that does, which then requires
  // grad), and through views, whose base's history is rebased (see docs/views_and_indexing.md). Refused, as in
  // libtorch, on a leaf that requires grad and on a view of one. Under NoGradGuard anything goes, unrecorded.
  Tensor& zero_();
  Tensor& fill_(double value);
  /// Copies `source` (broadcast to this shape, converted to this dtype) into this tensor.
  Tensor& copy_(const Tensor& source);
  /// this += alpha * other, with other broadcast to this shape.
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  /// this -= alpha * other, with other broadcast to this shape.
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  /// max(this, 0) in place (floating tensors).
  Tensor& relu_();
  /// Limits the values to [min, max] in place; either bound may be absent (use clamp_min_/clamp_max_ for one).
  Tensor& clamp_(double min, double max);
  Tensor& clamp_min_(double min);
  Tensor& clamp_max_(double max);
  /// Writes `value` where `mask` (broadcast to this shape) is non-zero.
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& operator+=(const Tensor& other) { return add_(other); }
  Tensor& operator+=(double value) { return add_(value); }
  Tensor& operator-=(const Tensor& other) { return sub_(other); }
  Tensor& operator-=(double value) { return sub_(value); }
  Tensor& operator*=(const Tensor& other) { return mul_(other); }
  Tensor& operator*=(double value) { return mul_(value); }
  Tensor& operator/=(const Tensor& other) { return div_(other); }
  Tensor& operator/=(double value) { return div_(value); }
  /// The version counter of the underlying storage (bumped by every in-place op, except on inference tensors).
  std::uint64_t version() const;

  /// Same values, new shape with the same numel (one extent may be -1); differentiable. A view sharing
  /// storage when the strides allow (always for a contiguous tensor), otherwise a copy.
  Tensor reshape(const Shape& shape) const;
  /// Like reshape but always a view; throws when this tensor's strides cannot express `shape` (use reshape
  /// or contiguous().view then).
  Tensor view(const Shape& shape) const;

  // ---- views (share storage; differentiable; see ops/shape_ops.h) ----
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  /// Transpose of a tensor of at most 2 dims.
  Tensor t() const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor expand(const Shape& sizes) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  /// Pieces along `dim` that are views of this tensor (ops/split.h).
  std::vector<Tensor> split(std::int64_t split_size, std::int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<std::int64_t>& split_sizes, std::int64_t dim = 0) const;
  std::vector<Tensor> chunk(std::int64_t chunks, std::int64_t dim = 0) const;
  std::vector<Tensor> unbind(std::int64_t dim = 0) const;

  // ---- indexing (ops/index.h; libtorch's spelling) ----
  /// `x.index({0, Slice(1, None, 2), None, Ellipsis})`: integers, Slices, None and Ellipsis give a view; int64
  /// index tensors and masks (advanced indexing) give a copy. Differentiable.
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  /// x[indices] = values in place (values broadcast to the indexed shape, same dtype); bumps the version.
  /// Recorded like the other in-place ops (differentiable in x's previous values and in `values`).
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);
  /// t[i] is t.select(0, i): a view (negative i counts from the end), as libtorch's. t[i][j] chains.
  Tensor operator[](std::int64_t index) const;
  /// t[idx] is t.index({idx}): an int64 tensor gathers along dim 0 and a floating 0/1 tensor is a mask (copies).
  Tensor operator[](const Tensor& index) const;

  // ---- libtorch's method spellings of ops (ops/tensor_op_methods.cpp): the free functions of the same name ----
  // Note: inside Tensor's own member functions these names hide the free functions: call tapegrad::sum(...).
  Tensor sum() const;
  Tensor sum(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor prod() const;
  Tensor prod(std::int64_t dim, bool keepdim = false) const;
  /// Full reductions only; max(x, dim) / min(x, dim) (values and indices) are free functions.
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;
  Tensor count_nonzero() const;
  /// Masks of this tensor's dtype holding 1 and 0 (tapegrad has no bool dtype; see ops/compare.h).
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  /// With a Scalar, PyTorch's promotion on an int64 tensor: an integer Scalar keeps int64 (wrapping), a
  /// floating one gives float32; div is true division (int64 / anything is float32).
  Tensor add(const Tensor& other) const;
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  /// int64 ** negative integer is refused, as PyTorch.
  Tensor pow(Scalar exponent) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  /// Keeps this tensor's dtype (an int64 tensor filled with 0.5 holds 0, as PyTorch).
  Tensor masked_fill(const Tensor& mask, Scalar value) const;

  /// Replaces the values, shape and dtype behind this handle with `source`'s (sharing its storage), keeping
  /// this tensor's identity, so every handle to it sees the change. Used by Module::to and clone. A .grad
  /// of another shape or dtype is cleared.
  void set_data(const Tensor& source);
  /// True for module buffers: they can never require grad.
  bool is_buffer() const;
  /// Marks this tensor as a module buffer (Module::register_buffer does this).
  void mark_as_buffer();
  /// True for tensors created under InferenceMode (see autograd/grad_mode.h): they never enter autograd.
  bool is_inference() const;

  /// True when both handles point at the same implementation.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  /// For the autograd machinery and ops.
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  /// Throws "<op>: expected a defined tensor" when undefined.
  void check_defined(const char* op) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// ---- factories ----
/// Options shared by factories: dtype and whether the result is a leaf that requires grad.
struct TensorOptions {
  DType dtype = DType::Float32;
  bool requires_grad = false;
  TensorOptions& with_dtype(DType d) { dtype = d; return *this; }
  TensorOptions& with_requires_grad(bool r = true) { requires_grad = r; return *this; }
};
/// Uninitialised storage of the given shape (for kernels that overwrite every element).
Tensor empty(const Shape& shape, DType dtype = DType::Float32);
/// Uninitialised, laid out in `format` (Contiguous or ChannelsLast, which needs a 4-d shape).
Tensor empty(const Shape& shape, DType dtype, MemoryFormat format);
/// Uninitialised, like's shape and dtype; Preserve keeps like's format when it is channels-last (libtorch's
/// Preserve for the dense layouts tapegrad's ops produce; any other layout gives row-major).
Tensor empty_like(const Tensor& like, MemoryFormat format = MemoryFormat::Preserve);
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
/// Like's shape and dtype; a channels-last `like` gives a channels-last result, as libtorch's (Preserve).
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);
/// 0-dim tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = DType::Float32);
/// [start, start+step, ...) below end.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Float32);
Tensor arange(std::int64_t end, DType dtype = DType::Int64);
/// Values in row-major order with a shape (numel must match).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options = {});
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions options = {});
Tensor from_vector(const std::vector<std::int64_t>& values, const Shape& shape);
/// `tensor({1, 2, 3, 4}, {2, 2})`.
Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options = {});
/// Uniform in [0, 1).
Tensor rand(const Shape& shape, Generator& generator = default_generator(), TensorOptions options = {});
/// Standard normal.
Tensor randn(const Shape& shape, Generator& generator = default_generator(), TensorOptions options = {});
Tensor uniform(const Shape& shape, double low, double high, Generator& generator = default_generator(),
               TensorOptions options = {});
Tensor normal(const Shape& shape, double mean, double stddev, Generator& generator = default_generator(),
              TensorOptions options = {});
/// Integers uniform in [low, high).
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator = default_generator());

/// PyTorch-like text: values, then shape, dtype and grad_fn or requires_grad when set.
std::string to_string(const Tensor& tensor);
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace tapegrad

template <>
struct fmt::formatter<tapegrad::Tensor> : fmt::formatter<std::string> {
  template <class Context>
  auto format(const tapegrad::Tensor& t, Context& ctx) const {
    return fmt::formatter<std::string>::format(tapegrad::to_string(t), ctx);
  }
};

TAPEGRAD_API_END
