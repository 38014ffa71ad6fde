// Tensor's in-place updates. Each checks, writes the values where they lie, and (when autograd tracks the
// target or an operand, grad mode on) records itself through detail::InPlaceRecord, its backward right below the
// write. How the record rebases the target's (or a view's base's) history: ops/inplace.cpp.
#include <limits>
#include <type_traits>
#include <utility>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/activation.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/detail/inplace.h>
#include <tapegrad/framework/ops/detail/relu_backward.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {
using detail::InPlaceRecord;
using Grads = std::vector<Tensor>;

// Note: inference tensors keep no version (nothing can have saved them), as in PyTorch.
void bump_version(TensorImpl& impl) {
  if (!impl.is_inference) impl.storage->bump_version();
}

// True when two elements of the view share one memory location (an expanded dim, stride 0).
bool overlaps(const TensorImpl& impl) {
  for (std::size_t d = 0; d < impl.shape.size(); ++d)
    if (impl.strides[d] == 0 && impl.shape[d] > 1) return true;
  return false;
}

// Runs `update(T* values)` over the tensor's elements in row-major order. A contiguous tensor (the
// common case) is updated where it lies; a strided view through a contiguous copy written back.
// Moves: `update` only stores values it is given (fill_, copy_), so it runs on bfloat16 too; any other update
// refuses bfloat16 (dispatch_all).
template <bool Moves = false, class F> void dispatch_update(DType dtype, F&& f) {
  if constexpr (Moves)
    detail::dispatch_moves(dtype, std::forward<F>(f));
  else
    detail::dispatch_all(dtype, std::forward<F>(f));
}
template <bool Moves = false, class Update>
void update_in_place(Tensor& self, const char* op, bool allow_overlap, Update update) {
  TensorImpl& impl = *self.impl();
  if (impl.contiguous) {
    dispatch_update<Moves>(impl.dtype, [&](auto tag) { update(self.data<decltype(tag)>()); });
  } else {
    if (!allow_overlap && overlaps(impl))
      fail(
          "{}: more than one element of the written-to tensor (shape {}, strides {}) refers to a single memory "
          "location (an expanded view); clone() it before writing in place",
          op, shape_string(impl.shape), shape_string(impl.strides));
    Tensor values = detail::contiguous_values(self);
    dispatch_update<Moves>(impl.dtype, [&](auto tag) { update(values.data<decltype(tag)>()); });
    detail::write_strided(self, values);
  }
  bump_version(impl);
}

// The storage elements [first, last] a tensor's elements span.
std::pair<std::int64_t, std::int64_t> element_span(const TensorImpl& impl) {
  std::int64_t first = impl.offset, last = impl.offset;
  const Shape strides = impl.strides.size() == impl.shape.size() ? impl.strides : contiguous_strides(impl.shape);
  for (std::size_t d = 0; d < impl.shape.size(); ++d) {
    const std::int64_t reach = (impl.shape[d] - 1) * strides[d];
    (reach < 0 ? first : last) += reach;
  }
  return {first, last};
}

// The values of `operand` for an elementwise write into `self`, contiguous.
// Note: an operand in self's storage, other than self itself (x[1:].copy_(x[:-1]), x.add_(x[0])), would be read
// while the write overwrites it: the loop then read its own results (the copy filled x with x[0], add_ made a
// running sum). Its values are copied first, so the write means what it says. PyTorch 1.13 refuses such a
// partial overlap ("some elements of the input tensor and the written-to tensor refer to a single memory
// location"); the copy costs only these aliasing calls.
Tensor operand_values(const Tensor& self, const Tensor& operand) {
  Tensor values = detail::contiguous_values(operand);  // a copy already, unless operand is row-major contiguous
  const TensorImpl &target = *self.impl(), &source = *values.impl();
  if (source.storage != target.storage || source.numel == 0 || target.numel == 0) return values;
  const bool same_view = source.offset == target.offset && source.shape == target.shape &&
                         source.strides == target.strides && source.dtype == target.dtype;
  if (same_view) return values;  // x.add_(x): each element is read before it is written
  const auto [first, last] = element_span(source);
  const auto [target_first, target_last] = element_span(target);
  if (source.dtype != target.dtype || (first <= target_last && target_first <= last)) return values.detach().clone();
  return values;
}

void check_broadcast(const Tensor& self, const Tensor& other, const char* op) {
  other.check_defined(op);
  if (broadcast_shapes(self.shape(), other.shape(), op) != self.shape())
    fail("{}: shape {} cannot be broadcast to {}", op, shape_string(other.shape()), shape_string(self.shape()));
}

void check_same_dtype(const Tensor& self, const Tensor& other, const char* op, const char* symbol) {
  if (other.dtype() != self.dtype())
    fail("{}: dtype mismatch, {} {} {}", op, dtype_name(self.dtype()), symbol, dtype_name(other.dtype()));
}

void check_floating(const Tensor& self, const char* op) {
  if (!is_floating(self.dtype()))
    fail("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(self.dtype()));
}

// self = combine(self, other) elementwise, other broadcast to self's shape (same dtype).
template <class Combine> void binary_in_place(Tensor& self, const Tensor& other, const char* op, Combine combine) {
  const Tensor values = operand_values(self, other);
  update_in_place(self, op, false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    detail::broadcast_binary(out, self.shape(), values.data<T>(), values.shape(), out, self.shape(),
                             [&](T x, T y) { return combine(x, y); });
  });
}

// self = map(self) elementwise.
template <class Map> void unary_in_place(Tensor& self, const char* op, Map map) {
  update_in_place(self, op, false, [&](auto* p) {
    for (std::int64_t i = 0, n = self.numel(); i < n; ++i) p[i] = map(p[i]);
  });
}

// self += alpha * other (sub_ passes -alpha); the gradient of `other` is alpha * g summed to its shape.
Tensor& add_scaled(Tensor& self, const Tensor& other, double alpha, const char* op, const char* symbol) {
  check_broadcast(self, other, op);
  check_same_dtype(self, other, op, symbol);
  InPlaceRecord record(self, op, {other});
  if (trace::active()) trace::annotate_reported(self, {{"alpha", alpha}});
  binary_in_place(self, other, op, [alpha](auto x, auto y) { return x + static_cast<decltype(x)>(alpha) * y; });
  record.record([alpha, shape = other.shape()](const Tensor& g, NeedsGrad needs) {
    return Grads{needs[0] ? g : Tensor(), needs[1] ? tapegrad::sum_to(tapegrad::mul(g, alpha), shape) : Tensor()};
  });
  return self;
}

// self = map(self) for a scalar op; `backward` maps g to the previous values' gradient.
template <class Map, class Backward> Tensor& scalar_in_place(Tensor& self, const char* op, Map map, Backward backward) {
  InPlaceRecord record(self, op);
  unary_in_place(self, op, map);
  record.record([backward](const Tensor& g, NeedsGrad) { return Grads{backward(g)}; });
  return self;
}

// 1 where min <= x <= max (either bound optional), 0 elsewhere: clamp's gradient mask, of x's dtype.
Tensor clamp_mask(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  NoGradGuard no_grad;
  Tensor mask = detail::contiguous_values(x.detach()).clone();
  detail::dispatch_floating(mask.dtype(), "clamp_", [&](auto tag) {
    using T = decltype(tag);
    T* p = mask.data<T>();
    for (std::int64_t i = 0, n = mask.numel(); i < n; ++i)
      p[i] = (!min || p[i] >= *min) && (!max || p[i] <= *max) ? T(1) : T(0);
  });
  return mask;
}

Tensor& clamp_in_place(Tensor& self, std::optional<double> min, std::optional<double> max, const char* op) {
  self.check_defined(op);
  check_floating(self, op);
  InPlaceRecord record(self, op);
  if (trace::active())
    trace::annotate_reported(self, {{"min", min.value_or(-std::numeric_limits<double>::infinity())},
                                    {"max", max.value_or(std::numeric_limits<double>::infinity())}});
  const Tensor mask = record.needs(0) ? clamp_mask(self, min, max) : Tensor();
  unary_in_place(self, op, [&](auto v) {
    using T = decltype(v);
    if (min && v < *min) v = static_cast<T>(*min);  // NaN stays NaN, as PyTorch
    if (max && v > *max) v = static_cast<T>(*max);
    return v;
  });
  record.record(
      [mask](const Tensor& g, NeedsGrad needs) { return Grads{needs[0] ? tapegrad::mul(g, mask) : Tensor()}; });
  return self;
}

// Overwrites every value: the previous values get no gradient.
Tensor& fill_in_place(Tensor& self, double value, const char* op) {
  InPlaceRecord record(self, op);
  update_in_place<true>(self, op, true, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    T v{};
    if constexpr (std::is_same_v<T, BFloat16>)
      v = bfloat16_from_float(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    for (std::int64_t i = 0, n = self.numel(); i < n; ++i) p[i] = v;
  });
  record.record([](const Tensor&, NeedsGrad) { return Grads{Tensor()}; });
  return self;
}
}  // namespace

Tensor& Tensor::zero_() { return fill_in_place(*this, 0.0, "zero_"); }
Tensor& Tensor::fill_(double value) { return fill_in_place(*this, value, "fill_"); }

Tensor& Tensor::copy_(const Tensor& source) {
  check_defined("copy_");
  check_broadcast(*this, source, "copy_");
  InPlaceRecord record(*this, "copy_", {source});
  const Tensor converted = operand_values(*this, source.detach().to(dtype()));
  update_in_place<true>(*this, "copy_", false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    detail::broadcast_binary(out, shape(), converted.data<T>(), converted.shape(), out, shape(),
                             [](T, T s) { return s; });
  });
  record.record([shape = source.shape(), type = source.dtype()](const Tensor& g, NeedsGrad needs) {
    return Grads{Tensor(), needs[1] ? tapegrad::sum_to(g, shape).to(type) : Tensor()};
  });
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_defined("add_");
  return add_scaled(*this, other, alpha, "add_", "+=");
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  check_defined("sub_");
  return add_scaled(*this, other, -alpha, "sub_", "-=");
}

Tensor& Tensor::add_(double value) {
  check_defined("add_");
  return scalar_in_place(
      *this, "add_", [value](auto x) { return static_cast<decltype(x)>(x + value); },
      [](const Tensor& g) { return g; });
}
Tensor& Tensor::sub_(double value) {
  check_defined("sub_");
  return scalar_in_place(
      *this, "sub_", [value](auto x) { return static_cast<decltype(x)>(x - value); },
      [](const Tensor& g) { return g; });
}
Tensor& Tensor::mul_(double value) {
  check_defined("mul_");
  return scalar_in_place(
      *this, "mul_", [value](auto x) { return static_cast<decltype(x)>(x * value); },
      [value](const Tensor& g) { return tapegrad::mul(g, value); });
}
Tensor& Tensor::div_(double value) {
  check_defined("div_");
  check_floating(*this, "div_");
  return scalar_in_place(
      *this, "div_", [value](auto x) { return static_cast<decltype(x)>(x / value); },
      [value](const Tensor& g) { return tapegrad::div(g, value); });
}

// Note: `other` is saved before the write, so x.mul_(x) (other aliases the target) makes backward throw, as in
// PyTorch. The previous values are copied only when other's gradient needs them.
Tensor& Tensor::mul_(const Tensor& other) {
  check_defined("mul_");
  check_broadcast(*this, other, "mul_");
  check_same_dtype(*this, other, "mul_", "*=");
  InPlaceRecord record(*this, "mul_", {other});
  const SavedTensor saved_other = record.needs(0) ? SavedTensor(other, "mul_") : SavedTensor();
  const Tensor previous = detail::previous_values_if(record, 1, *this);
  binary_in_place(*this, other, "mul_", [](auto x, auto y) { return x * y; });
  record.record([saved_other, previous, shape = other.shape()](const Tensor& g, NeedsGrad needs) {
    return Grads{needs[0] ? tapegrad::mul(g, saved_other.get()) : Tensor(),
                 needs[1] ? tapegrad::sum_to(tapegrad::mul(g, previous), shape) : Tensor()};
  });
  return *this;
}

Tensor& Tensor::div_(const Tensor& other) {
  check_defined("div_");
  check_floating(*this, "div_");
  check_broadcast(*this, other, "div_");
  check_same_dtype(*this, other, "div_", "/=");
  InPlaceRecord record(*this, "div_", {other});
  const SavedTensor saved_other = record.active() ? SavedTensor(other, "div_") : SavedTensor();
  const Tensor previous = detail::previous_values_if(record, 1, *this);
  binary_in_place(*this, other, "div_", [](auto x, auto y) { return x / y; });
  record.record([saved_other, previous, shape = other.shape()](const Tensor& g, NeedsGrad needs) {
    const Tensor& y = saved_other.get();
    return Grads{needs[0] ? tapegrad::div(g, y) : Tensor(),
                 needs[1] ? tapegrad::sum_to(
                                tapegrad::neg(tapegrad::div(tapegrad::mul(g, previous), tapegrad::mul(y, y))), shape)
                          : Tensor()};
  });
  return *this;
}

// Note: relu_'s backward reads its result (ReLU's mask is the same from the input or the output), saved after
// the write: writing into it again before backward makes backward throw, as in PyTorch.
Tensor& Tensor::relu_() {
  check_defined("relu_");
  check_floating(*this, "relu_");
  InPlaceRecord record(*this, "relu_");
  unary_in_place(*this, "relu_", [](auto v) { return v <= decltype(v)(0) ? decltype(v)(0) : v; });
  if (record.active())
    record.record([result = SavedTensor(detach(), "relu_")](const Tensor& g, NeedsGrad) {
      return Grads{detail::relu_backward(g, result.get())};
    });
  return *this;
}

Tensor& Tensor::clamp_(double min, double max) { return clamp_in_place(*this, min, max, "clamp_"); }
Tensor& Tensor::clamp_min_(double min) { return clamp_in_place(*this, min, std::nullopt, "clamp_min_"); }
Tensor& Tensor::clamp_max_(double max) { return clamp_in_place(*this, std::nullopt, max, "clamp_max_"); }

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  check_defined("masked_fill_");
  check_broadcast(*this, mask, "masked_fill_");
  InPlaceRecord record(*this, "masked_fill_");
  // Note: the backward reads the mask; a copy taken before the write, so that writing into the caller's mask
  // afterwards (or a mask aliasing the target) cannot change the gradient (it silently did).
  const Tensor kept_mask = [&] {
    NoGradGuard no_grad;
    return record.active() ? tapegrad::ne(mask.detach(), 0.0) : Tensor();
  }();
  const Tensor filled = [&] {
    NoGradGuard no_grad;
    return detail::contiguous_values(tapegrad::masked_fill(detach(), mask, value));
  }();
  update_in_place(*this, "masked_fill_", false, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    const T* from = filled.data<T>();
    for (std::int64_t i = 0, n = numel(); i < n; ++i) out[i] = from[i];
  });
  record.record([kept_mask](const Tensor& g, NeedsGrad) {
    return Grads{tapegrad::where(kept_mask, scalar_tensor(0.0, g.dtype()), g)};
  });
  return *this;
}

// ---- free functions, as libtorch's torch::relu_ and friends ----

Tensor& relu_(Tensor& x) { return x.relu_(); }

Tensor& leaky_relu_(Tensor& x, double negative_slope) {
  x.check_defined("leaky_relu_");
  check_floating(x, "leaky_relu_");
  InPlaceRecord record(x, "leaky_relu_");
  if (trace::active()) trace::annotate_reported(x, {{"negative_slope", negative_slope}});
  if (record.active() && negative_slope < 0)  // the result's sign no longer tells which side x was on
    fail(
        "leaky_relu_: in place with a negative slope ({}) is not differentiable from the result (PyTorch refuses it "
        "too); use leaky_relu",
        negative_slope);
  unary_in_place(x, "leaky_relu_", [negative_slope](auto v) {
    return v > decltype(v)(0) ? v : static_cast<decltype(v)>(v * negative_slope);
  });
  if (record.active())
    record.record([result = SavedTensor(x.detach(), "leaky_relu_"), negative_slope](const Tensor& g, NeedsGrad) {
      return Grads{tapegrad::where(tapegrad::gt(result.get(), 0.0), g, tapegrad::mul(g, negative_slope))};
    });
  return x;
}

Tensor& clamp_(Tensor& x, std::optional<double> min, std::optional<double> max) {
  return clamp_in_place(x, min, max, "clamp_");
}

}  // namespace tapegrad
