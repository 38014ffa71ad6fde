#pragma once
// Internal: what a Tensor handle points at. Included by .cpp files only.
#include <memory>
#include <string>

#include <tapegrad/framework/storage.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

/// Autograd identity of a tensor that requires grad.
/// Note: a leaf's meta holds its accumulated .grad. A non-leaf's meta holds the gradient arriving during
/// a backward pass, only until its producing record has consumed it. The tape points at metas
/// (strongly for inputs, weakly for outputs); metas never point at records, so ownership runs one way
/// and no destructor recurses along a long graph.
struct AutogradMeta {
  bool is_leaf = true;
  Tensor grad;
  const char* grad_fn = nullptr;     // producing op, for printing and errors
  bool producer_released = false;    // its record ran backward without retain_graph
  bool capture = false;              // autograd::grad() wants this tensor's gradient
  Tensor captured_grad;
  // Note: the tape is per thread. A non-leaf remembers which tape holds its record, and whether its graph
  // reaches a non-leaf of another tape, so a backward that cannot walk the whole graph is refused up front.
  std::uint64_t tape_id = 0;
  bool crosses_tapes = false;
  // Note: a leaf's .grad takes the leaf's memory format (PyTorch's AccumulateGrad layout contract), but the tape
  // sees metas, not tensors; so a leaf's meta remembers whether the leaf was channels-last when an op last
  // recorded it as an input (autograd/tape.cpp).
  bool channels_last = false;
};

/// Note: element (i0, i1, ...) lives at storage element `offset + i0*strides[0] + i1*strides[1] + ...`.
/// A fresh tensor is contiguous (row-major strides, offset 0); views share the storage with other strides
/// and offset. `contiguous` caches whether the layout is row-major (dims of extent 1 ignored) so that
/// data<T>() and the ops' contiguous() at entry cost one load on the contiguous path. Whoever changes
/// shape, strides or offset calls set_layout, which keeps numel and `contiguous` in step.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;            // in elements, one per dim; left empty for a row-major tensor (saves an allocation)
  std::int64_t offset = 0;  // in elements
  bool contiguous = true;
  std::int64_t numel = 0;
  DType dtype = DType::Float32;
  std::shared_ptr<AutogradMeta> autograd;  // null: does not require grad
  bool is_buffer = false;                  // module state that is never differentiated
  bool is_inference = false;               // created under InferenceMode: never enters autograd
  // The tensor a view was taken from (the first non-view in the chain), empty for a non-view.
  // Note: weak, so a view taken under NoGradGuard does not keep its base's autograd state (and, through it,
  // gradients) alive. A view whose history follows its base's (see ops/inplace.cpp) also holds it strongly in
  // `tracked_base`: one recorded by a view op, or taken from a base that did not require grad then. Only
  // `untracked_view`s (taken without recording from a base that required grad) hold it weakly alone; an
  // in-place op on one is refused while grad mode is on, as PyTorch refuses it.
  std::weak_ptr<TensorImpl> base;
  std::shared_ptr<TensorImpl> tracked_base;
  bool untracked_view = false;
  // Note: a base's `history` counts the in-place ops recorded on it or through its views; a tracked view's is
  // the base's count when its own autograd identity was made. They differ once the base's history was
  // rewritten, and reading the view (requires_grad) then gives it a new identity: a view of the new history.
  std::uint64_t history = 0;

  void set_layout(Shape new_shape, Shape new_strides, std::int64_t new_offset);
};

/// True when `strides` are row-major for `shape` (dims of extent 1 may have any stride; numel 0 counts;
/// empty strides stand for row-major).
bool is_contiguous_layout(const Shape& shape, const Shape& strides);

namespace detail {
// The InferenceMode flag of the calling thread. It lives at this level (not beside grad mode) because the
// factories, which sit below autograd, mark the tensors they create.
bool inference_mode_enabled();
void set_inference_mode_enabled(bool enabled);
// Throws "<op>: ... inference tensor ..." when `t` was created under InferenceMode.
void check_not_inference(const Tensor& t, const char* op, const char* use);

/// A view of `x`: same storage, the given layout, no autograd (the caller records it), x's base.
Tensor make_view(const Tensor& x, Shape shape, Shape strides, std::int64_t offset);
/// `t` itself when contiguous, else a fresh contiguous copy of its values that is not recorded: for ops
/// that read raw pointers and record with the original tensor as input.
Tensor contiguous_values(const Tensor& t);
/// Writes the contiguous values `src` (of dst's shape and dtype) into dst's strided positions.
void write_strided(const Tensor& dst, const Tensor& src);
}  // namespace detail

}  // namespace tapegrad
