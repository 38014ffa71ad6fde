#include <tapegrad/framework/autograd/grad_mode.h>

#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

namespace {
// Note: initial-exec TLS, as inference_mode in tensor.cpp: every op reads it.
[[gnu::tls_model("initial-exec")]] thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

bool is_inference_mode_enabled() { return detail::inference_mode_enabled(); }

InferenceMode::InferenceMode(bool enabled)
    : previous_grad_(grad_enabled), previous_inference_(detail::inference_mode_enabled()) {
  if (enabled) grad_enabled = false;
  detail::set_inference_mode_enabled(enabled);
}

InferenceMode::~InferenceMode() {
  grad_enabled = previous_grad_;
  detail::set_inference_mode_enabled(previous_inference_);
}

}  // namespace tapegrad
