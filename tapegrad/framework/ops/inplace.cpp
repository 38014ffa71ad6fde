// In-place ops in autograd, as libtorch records them.
//
// Design.
// - Identity. A tensor's autograd identity is its AutogradMeta (TensorImpl::autograd); the tape points at metas,
//   never at handles. An in-place op therefore records like any op, then *rebases* the target: the target's
//   meta becomes the output of the new record (rebase_history, autograd/function.h), whose input 0 is the
//   previous meta. Every handle to the target shares its TensorImpl, so all of them see the new history; records
//   that used the old values keep the old meta and differentiate through what they read.
// - Views (PyTorch's CopySlices). A view's TensorImpl knows its base (the first non-view, `base`/`tracked_base`).
//   An in-place op on a view v of base b records on b: the record's input 0 is b's previous identity, its
//   operands the op's, and its backward takes b's gradient g, reads v's part of it (gathered by the base-element
//   index of each of v's elements, computed once at record time), runs the op's own backward on that, and
//   returns g with v's part replaced by the op's gradient for v's previous values. b's meta becomes that
//   record's output, then v's is re-derived from b ("as_strided": the gradient of v scattered into b's shape).
// - Other views of b. b's `history` counts its rewrites; every tracked view remembers the count its meta was
//   made at. Reading a view whose count is behind (Tensor::requires_grad, which every op asks before recording
//   and which is defined here for that reason) re-derives its meta from b's current one first, so a view taken
//   before an in-place op on b or on another of b's views sees the new history, as PyTorch's lazily
//   regenerated view grad_fn does. Only views whose history follows b's are tracked: recorded views, and views
//   of a b that did not require grad. A view taken under NoGradGuard from a b that required grad is untracked
//   (it holds b weakly, so it keeps no graph alive), and an in-place op on it with grad mode on is refused.
// - Versions. The write bumps the storage's version counter, shared by b and all its views, as before: a value
//   some record saved (through any view) and the op overwrote makes that record's backward throw. An op whose
//   backward needs the target's values saves them as they are after the write (relu_: the result, with the
//   bumped version), or copies them before the write when it needs the previous ones (mul_ and div_ for the
//   operand's gradient, clamp_'s mask).
// - Refusals, as PyTorch: a leaf that requires grad, a view of one, an untracked view; grad mode off: anything
//   goes and nothing is recorded. PyTorch also refuses writing into the pieces of split/chunk/unbind; tapegrad
//   records those like any view (the gradient is right).
#include <tapegrad/framework/ops/detail/inplace.h>

#include <algorithm>
#include <limits>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/index.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

namespace {

Shape strides_of(const TensorImpl& impl) {
  return impl.strides.size() == impl.shape.size() ? impl.strides : contiguous_strides(impl.shape);
}

// For each element of `view` (row-major), the row-major index of the same element of `base` (its base): the
// positions of the view's part in a flat base-shaped tensor. int64, of the view's shape.
Tensor base_positions(const TensorImpl& base, const TensorImpl& view, const char* op) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(view.numel));
  const Shape view_strides = strides_of(view);
  if (base.contiguous) {
    detail::for_each_run(view.shape, view_strides, view.offset - base.offset,
                         [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                           for (std::int64_t k = 0; k < inner; ++k)
                             positions[static_cast<std::size_t>(o + k)] = s + k * step;
                         });
  } else {  // a strided base (a detach()ed view): map storage positions back to base elements through a table
    const Shape base_strides = strides_of(base);
    std::int64_t low = base.offset, high = base.offset;
    for (std::size_t d = 0; d < base.shape.size(); ++d) {
      if (base.shape[d] == 0) return from_vector(positions, view.shape);
      const std::int64_t reach = (base.shape[d] - 1) * base_strides[d];
      (reach < 0 ? low : high) += reach;
    }
    std::vector<std::int64_t> element_at(static_cast<std::size_t>(high - low + 1), -1);
    detail::for_each_run(base.shape, base_strides, base.offset,
                         [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                           for (std::int64_t k = 0; k < inner; ++k) {
                             std::int64_t& slot = element_at[static_cast<std::size_t>(s + k * step - low)];
                             if (slot >= 0)
                               fail(
                                   "{}: the base (shape {}, strides {}) of the written view has elements sharing "
                                   "one memory location, so its gradient is not defined; clone() it first",
                                   op, shape_string(base.shape), shape_string(base_strides));
                             slot = o + k;
                           }
                         });
    detail::for_each_run(view.shape, view_strides, view.offset,
                         [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                           for (std::int64_t k = 0; k < inner; ++k)
                             positions[static_cast<std::size_t>(o + k)] =
                                 element_at[static_cast<std::size_t>(s + k * step - low)];
                         });
  }
  return from_vector(positions, view.shape);
}

// The gradient of a base from the gradient of its view: `g` scattered (summed, for an expanded view) into
// zeros of the base's shape.
Tensor scatter_into_base(const Tensor& g, const Tensor& flat_positions, const Shape& base_shape) {
  const Tensor zero = zeros({shape_numel(base_shape)}, TensorOptions{}.with_dtype(g.dtype()));
  return index_add(zero, 0, flat_positions, g.reshape({-1})).reshape(base_shape);
}

// Gives the tracked view `view` a new identity: a view of its base's current history.
void rederive_view(const Tensor& view) {
  TensorImpl& impl = *view.impl();
  const std::shared_ptr<TensorImpl> base = impl.tracked_base;
  impl.history = base->history;
  if (!base->autograd) {
    impl.autograd = nullptr;
    return;
  }
  const Tensor positions = base_positions(*base, impl, "as_strided").reshape({-1});
  rebase_history("as_strided", view, {Tensor(base)}, [positions, shape = base->shape](const Tensor& g, NeedsGrad) {
    return std::vector<Tensor>{scatter_into_base(g, positions, shape)};
  });
}

[[noreturn]] void fail_untracked_view(const TensorImpl& impl, const char* op) {
  const std::shared_ptr<TensorImpl> base = impl.base.lock();
  fail(
      "{}: tensor of shape {} is a view of a tensor of shape {} that requires grad, taken under NoGradGuard: a view "
      "created in no_grad mode cannot be modified in place with grad mode enabled (PyTorch refuses it too). Take "
      "the view and write into it both under NoGradGuard (not recorded) or both outside it (recorded)",
      op, shape_string(impl.shape), base ? shape_string(base->shape) : std::string("(freed)"));
}

}  // namespace

// Note: see the design above; reading a stale tracked view re-derives its autograd identity first.
bool Tensor::requires_grad() const {
  if (!impl_) return false;
  if (impl_->tracked_base && impl_->history != impl_->tracked_base->history) rederive_view(*this);
  return impl_->autograd != nullptr;
}

namespace detail {

InPlaceRecord::InPlaceRecord(const Tensor& target, const char* op, std::vector<Tensor> operands)
    : target_(target), op_(op), operands_(std::move(operands)) {
  target.check_defined(op);
  if (trace::active()) [[unlikely]]
    trace::report_in_place(op, target, operands_);
  if (!is_grad_enabled()) return;
  TensorImpl& impl = *target.impl();
  if (impl.untracked_view) fail_untracked_view(impl, op);
  const bool target_requires_grad = target.requires_grad();  // re-derives a stale view first
  const std::shared_ptr<TensorImpl>& base = impl.tracked_base;
  if (base && base->autograd && base->autograd->is_leaf)
    fail(
        "{}: tensor of shape {} is a view of a leaf of shape {} that requires grad: a view of a leaf Variable that "
        "requires grad is being used in an in-place operation. Write under NoGradGuard (as optimizers do), or into "
        "a clone()",
        op, shape_string(impl.shape), shape_string(base->shape));
  if (!base && target_requires_grad && impl.autograd->is_leaf)
    fail(
        "{}: tensor of shape {} requires grad and is a leaf: a leaf Variable that requires grad is being used in an "
        "in-place operation. Write under NoGradGuard (as optimizers do), or into a clone()",
        op, shape_string(impl.shape));
  bool operand_requires_grad = false;
  for (const Tensor& operand : operands_) operand_requires_grad |= operand.defined() && operand.requires_grad();
  if ((!target_requires_grad && !operand_requires_grad) || !is_floating(impl.dtype)) return;
  if (impl.is_buffer || (base && base->is_buffer))
    fail(
        "{}: tensor of shape {} is a module buffer (or a view of one) and an operand requires grad; buffers are "
        "never differentiated: write under NoGradGuard or detach() the operand",
        op, shape_string(impl.shape));
  check_not_inference(target, op, "be modified in place by an op that autograd records");
  active_ = true;
  // A handle carrying the previous identity (of the base, for a view): input 0 of the record.
  previous_ = Tensor(std::make_shared<TensorImpl>(base ? *base : impl));
  previous_.impl()->tracked_base.reset();
}

bool InPlaceRecord::needs(std::size_t input) const {
  if (!active_) return false;
  if (input == 0) return previous_.impl()->autograd != nullptr;
  const Tensor& operand = operands_.at(input - 1);
  return operand.defined() && operand.requires_grad();
}

void InPlaceRecord::record(BackwardFn backward) {
  if (!active_) return;
  active_ = false;
  std::vector<Tensor> inputs{previous_};
  inputs.insert(inputs.end(), operands_.begin(), operands_.end());
  TensorImpl& impl = *target_.impl();
  const std::shared_ptr<TensorImpl> base = impl.tracked_base;
  if (!base) {
    rebase_history(op_, target_, inputs, std::move(backward));
    ++impl.history;  // views of the target now follow the new history
    return;
  }
  // CopySlices: the record goes on the base; its backward runs the op's on the view's part of the gradient.
  const Tensor positions = base_positions(*base, impl, op_).reshape({-1});
  rebase_history("copy_slices", Tensor(base), inputs,
                 [f = std::move(backward), positions, base_shape = base->shape, view_shape = impl.shape](
                     const Tensor& g, NeedsGrad needs) {
                   const Tensor flat = g.reshape({-1});
                   std::vector<Tensor> grads = f(index_select(flat, 0, positions).reshape(view_shape), needs);
                   if (needs[0]) {
                     Tensor rest = index_put(flat, {positions}, scalar_tensor(0.0, g.dtype()));
                     if (grads[0].defined()) rest = index_add(rest, 0, positions, grads[0].reshape({-1}));
                     grads[0] = rest.reshape(base_shape);
                   }
                   return grads;
                 });
  ++base->history;
  rederive_view(target_);
}

// Note: a recorded clone (grad mode is on when a record is active), so that the operand's gradient, which
// reads these values, is itself differentiable (second derivatives), as PyTorch's saved original self is.
Tensor previous_values_if(const InPlaceRecord& record, std::size_t input, const Tensor& target) {
  if (!record.needs(input)) return Tensor();
  return target.clone();
}

}  // namespace detail
}  // namespace tapegrad
