// The thread-local autocast state. The ops that honour it read it through autocast_enabled()
// (ops/detail/autocast.h); the state itself knows nothing of them.
#include <tapegrad/framework/autocast.h>

#include <tapegrad/framework/error.h>

namespace tapegrad {

namespace {

// Note: thread-local like grad mode: a guard on one thread never changes what another thread computes.
struct State {
  bool enabled = false;
  DType dtype = DType::BFloat16;
};

State& state() {
  thread_local State instance;
  return instance;
}

}  // namespace

bool autocast_enabled() { return state().enabled; }
DType autocast_dtype() { return state().dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(state().enabled), previous_dtype_(state().dtype) {
  if (dtype != DType::BFloat16)
    fail("AutocastGuard: the CPU autocasts to bfloat16 only, got {} (as torch.autocast(\"cpu\") accepts only "
         "torch.bfloat16)",
         dtype_name(dtype));
  state() = {enabled, dtype};
}

AutocastGuard::~AutocastGuard() { state() = {previous_enabled_, previous_dtype_}; }

}  // namespace tapegrad
