#pragma once
/// Thread-local grad mode (whether ops record on the tape) and InferenceMode.
#include <tapegrad/export.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// True unless a NoGradGuard (or set_grad_enabled(false)) is active on this thread.
bool is_grad_enabled();
/// Switches recording on or off for this thread.
void set_grad_enabled(bool enabled);

/// RAII: sets grad mode for a scope and restores the previous mode on exit.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

/// RAII: no op records anything in this scope on this thread (inference, optimizer updates).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

/// True while an InferenceMode guard is active on this thread.
bool is_inference_mode_enabled();

/// RAII, libtorch's `c10::InferenceMode`: in this scope nothing records (grad mode is off) and every tensor
/// created is an inference tensor (Tensor::is_inference()). In-place ops on inference tensors do not bump
/// the version counter. An inference tensor can never enter autograd later: using it in an op that records
/// (grad mode on, some input requires grad), saving it for backward, or calling requires_grad_() on it
/// throws an error naming the op. clone() it outside InferenceMode to get a normal tensor.
/// `InferenceMode guard(false)` switches it off for a nested scope (grad mode stays as it was).
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool previous_grad_;
  bool previous_inference_;
};

}  // namespace tapegrad

TAPEGRAD_API_END
