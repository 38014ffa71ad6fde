#pragma once
/// Automatic mixed precision on the CPU: inside an AutocastGuard, matmul, bmm, linear and conv2d compute in
/// bfloat16 (float32 accumulation) and return float32; everything else is untouched. libtorch's CPU autocast.
#include <tapegrad/export.h>

#include <tapegrad/framework/dtype.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// True while an enabled AutocastGuard is active on this thread.
bool autocast_enabled();
/// The dtype the autocast ops compute in on this thread (DType::BFloat16; the last guard's dtype).
DType autocast_dtype();

/// RAII, like `torch::autocast(device_type="cpu", dtype=torch.bfloat16)`: in this scope, on this thread,
/// matmul / bmm / linear / conv2d with float32 inputs round their inputs to bfloat16 (round to nearest even),
/// multiply them with float32 accumulation and return float32 tensors; their backward (recorded now, run
/// whenever) does the same with the gradient. Parameters, gradients, optimizer state and every other op stay
/// float32. Guards nest; each restores the state it found. `AutocastGuard guard(DType::BFloat16, false)`
/// switches autocast off for a nested scope.
/// Note: only DType::BFloat16 is accepted (PyTorch's CPU autocast accepts bfloat16 only, too); another dtype
/// is an error naming it. Unlike PyTorch, the outputs are float32, not bfloat16: see docs/autocast.md.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

}  // namespace tapegrad

TAPEGRAD_API_END
