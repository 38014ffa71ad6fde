// tapegrad-inspect's view of PyTorch (torch.save zip) and safetensors files: each tensor's name, its dtype as
// stored, shape and summary statistics (the readers of framework/serialize/interop.h do the parsing).
#include <algorithm>
#include <limits>
#include <string>

#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/interop.h>

using namespace tapegrad;

/// Prints the file and returns true when it is a PyTorch or safetensors file; false for anything else.
bool print_foreign_file(const std::string& path) {
  const StateFormat format = sniff_state_format_of_file(path);
  if (format != StateFormat::PyTorch && format != StateFormat::Safetensors && format != StateFormat::PyTorchLegacy)
    return false;
  const std::string bytes = foreign::read_whole_file(path, "tapegrad-inspect");  // read_pytorch names a legacy file
  const bool pytorch = format != StateFormat::Safetensors;
  const std::vector<ForeignTensor> tensors = pytorch ? read_pytorch(bytes, path) : read_safetensors(bytes, path);
  std::int64_t elements = 0;
  for (const ForeignTensor& t : tensors) elements += t.value.numel();
  fmt::print("{}\n  {}, {} tensors, {} elements\n", path, pytorch ? "PyTorch torch.save zip" : "safetensors",
             tensors.size(), elements);
  fmt::print("\n  {:<40} {:<9} {:<16} {:>12} {:>12} {:>12}\n", "name", "dtype", "shape", "min", "mean", "max");
  for (const ForeignTensor& t : tensors) {
    const std::vector<double> values = t.value.to_vector();
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, total = 0;
    for (const double v : values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      total += v;
    }
    if (values.empty())
      fmt::print("  {:<40} {:<9} {:<16} {:>12} {:>12} {:>12}\n", t.name, t.stored_dtype, shape_string(t.value.shape()),
                 "-", "-", "-");
    else
      fmt::print("  {:<40} {:<9} {:<16} {:>12.5g} {:>12.5g} {:>12.5g}\n", t.name, t.stored_dtype,
                 shape_string(t.value.shape()), lo, total / static_cast<double>(values.size()), hi);
  }
  return true;
}
