// The oneDNN engine, streams and scratchpad attribute shared by the oneDNN-backed kernels.
#include <tapegrad/framework/kernels/onednn_support.h>

#include <omp.h>

namespace tapegrad::kernels::onednn {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

int primitive_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

}  // namespace tapegrad::kernels::onednn
