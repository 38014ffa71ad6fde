#pragma once
/// Thread-local grad mode: whether ops record on the tape.
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

}  // namespace tapegrad

TAPEGRAD_API_END
