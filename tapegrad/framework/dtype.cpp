#include <tapegrad/framework/dtype.h>

namespace tapegrad {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
  }
  return "unknown";
}

std::size_t element_size(DType dtype) { return dtype == DType::Float32 ? 4 : 8; }

}  // namespace tapegrad
