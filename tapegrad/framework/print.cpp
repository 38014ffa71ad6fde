// Printing in the spirit of PyTorch's repr: nested brackets, then the facts a debugger wants.
#include <ostream>

#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad {

namespace {
constexpr std::int64_t kSummariseAbove = 1000;  // print only the edges of larger tensors
constexpr std::int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype) {
  if (dtype == DType::Int64) return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{:.4f}", v);
}

void format_block(std::string& out, const std::vector<double>& values, const Shape& shape, const Shape& strides,
                  std::size_t d, std::int64_t offset, DType dtype, bool summarise) {
  if (d == shape.size()) {
    out += format_value(values[static_cast<std::size_t>(offset)], dtype);
    return;
  }
  out += '[';
  const std::int64_t extent = shape[d];
  for (std::int64_t i = 0; i < extent; ++i) {
    if (summarise && extent > 2 * kEdgeItems && i == kEdgeItems) {
      out += "..., ";
      i = extent - kEdgeItems;
    }
    format_block(out, values, shape, strides, d + 1, offset + i * strides[d], dtype, summarise);
    if (i + 1 < extent) out += d + 1 == shape.size() ? ", " : ",\n" + std::string(d + 8, ' ');
  }
  out += ']';
}
}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  format_block(out, t.to_vector(), t.shape(), contiguous_strides(t.shape()), 0, 0, t.dtype(),
               t.numel() > kSummariseAbove);
  out += fmt::format(", shape={}, dtype={}", shape_string(t.shape()), dtype_name(t.dtype()));
  if (!t.grad_fn_name().empty())
    out += fmt::format(", grad_fn=<{}>", t.grad_fn_name());
  else if (t.requires_grad())
    out += ", requires_grad=true";
  out += ')';
  return out;
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << to_string(t); }

}  // namespace tapegrad
