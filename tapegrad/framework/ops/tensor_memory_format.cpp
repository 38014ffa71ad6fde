// Tensor::contiguous(MemoryFormat): the differentiable change of memory format, forward and backward together.
// Defined among the ops because it records on the tape; the layout rules are in tensor_memory_format.cpp.
#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

// Note: an undefined tensor passes through, as contiguous() lets ops call it on optional inputs. The gradient
// passes through in whatever layout it arrives: the values are the same elements, only their order in memory
// differs, and every consumer reads a gradient through its strides.
Tensor Tensor::contiguous(MemoryFormat format) const {
  if (!impl_) return *this;
  if (format == MemoryFormat::Contiguous) return contiguous();
  if (format == MemoryFormat::Preserve)
    fail("contiguous: memory format Preserve is not a layout (shape {})", shape_string(shape()));
  if (is_contiguous(format)) return *this;
  return record_if_needed("contiguous", detail::channels_last_values(*this), {*this}, [] {
    return [](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{g}; };
  });
}

}  // namespace tapegrad
