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
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  std::int64_t numel = 0;
  DType dtype = DType::Float32;
  std::shared_ptr<AutogradMeta> autograd;  // null: does not require grad
  bool is_buffer = false;                  // module state that is never differentiated
  bool is_inference = false;               // created under InferenceMode: never enters autograd
};

namespace detail {
// The InferenceMode flag of the calling thread. It lives at this level (not beside grad mode) because the
// factories, which sit below autograd, mark the tensors they create.
bool inference_mode_enabled();
void set_inference_mode_enabled(bool enabled);
// Throws "<op>: ... inference tensor ..." when `t` was created under InferenceMode.
void check_not_inference(const Tensor& t, const char* op, const char* use);
}  // namespace detail

}  // namespace tapegrad
