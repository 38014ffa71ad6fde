#include <tapegrad/framework/dtype.h>

namespace tapegrad {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::BFloat16:
      return "bfloat16";
  }
  return "unknown";
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 4;
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::BFloat16:
      return 2;
  }
  return 8;
}

}  // namespace tapegrad
