#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad {

namespace {
thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

}  // namespace tapegrad
