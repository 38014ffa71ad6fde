#pragma once
// Internal: recording an in-place op on the tape (the design is at the top of ops/inplace.cpp).
#include <cstddef>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// One in-place op's recording, in two halves around the write. The constructor, before anything is written,
/// refuses what PyTorch refuses (a leaf or a view of a leaf that requires grad, a view taken under NoGradGuard
/// from a tensor that requires grad) and decides whether a record is needed: grad mode on, a floating target,
/// and the target or an operand requiring grad. After the write, record() appends it.
/// Note: the backward given to record() sees the written tensor's shape: given its gradient, it returns the
/// gradients of the target's previous values (input 0) and of each operand (input 1 + j), in that order. When the
/// target is a view, the record goes on its base (PyTorch's CopySlices) and the view is re-derived from it.
class InPlaceRecord {
 public:
  InPlaceRecord(const Tensor& target, const char* op, std::vector<Tensor> operands = {});

  /// A record will follow: save what backward needs (before the write, for the previous values).
  bool active() const { return active_; }
  /// Whether backward will want input i's gradient (0: the target's previous values, 1 + j: operand j).
  bool needs(std::size_t input) const;
  /// After the write: appends the record when active().
  void record(BackwardFn backward);

 private:
  Tensor target_;
  const char* op_;
  std::vector<Tensor> operands_;
  bool active_ = false;
  Tensor previous_;  // a handle holding the previous autograd identity of the target (or of its base)
};

/// The target's values before the write, when backward will need them for operand `input` (else undefined).
Tensor previous_values_if(const InPlaceRecord& record, std::size_t input, const Tensor& target);

}  // namespace tapegrad::detail
