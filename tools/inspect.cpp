// tapegrad-inspect FILE: prints a checkpoint's header, its entries with summary statistics, and its metadata; a
// PyTorch, safetensors or ONNX file's contents.
#include <algorithm>
#include <cstdio>
#include <limits>

#include <tapegrad/framework/serialize/checkpoint.h>

// inspect_foreign.cpp: PyTorch and safetensors files (true when `path` is one and was printed).
bool print_foreign_file(const std::string& path);
#ifdef TAPEGRAD_INSPECT_ONNX
// inspect_onnx.cpp: ONNX models (true when `path` is a .onnx file and was printed).
bool print_onnx_file(const std::string& path);
#else
// Note: built without the ONNX component (no libonnx-dev), the tool names what is missing instead of reading
// a .onnx file as a checkpoint.
bool print_onnx_file(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0)
    tapegrad::fail("{}: this tapegrad-inspect was built without ONNX support (install libonnx-dev and rebuild)", path);
  return false;
}
#endif

namespace {

using namespace tapegrad;

void print_entries(const char* section, const std::vector<CheckpointEntry>& entries) {
  if (entries.empty()) return;
  fmt::print("\n{} ({} entries)\n", section, entries.size());
  fmt::print("  {:<40} {:<10} {:<8} {:<16} {:>12} {:>12} {:>12}\n", "name", "kind", "dtype", "shape", "min", "mean",
             "max");
  for (const CheckpointEntry& e : entries) {
    const std::vector<double> values = e.value.to_vector();
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, total = 0;
    for (double v : values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      total += v;
    }
    if (values.empty())
      fmt::print("  {:<40} {:<10} {:<8} {:<16} {:>12} {:>12} {:>12}\n", e.name, entry_kind_name(e.kind),
                 dtype_name(e.value.dtype()), shape_string(e.value.shape()), "-", "-", "-");
    else
      fmt::print("  {:<40} {:<10} {:<8} {:<16} {:>12.5g} {:>12.5g} {:>12.5g}\n", e.name, entry_kind_name(e.kind),
                 dtype_name(e.value.dtype()), shape_string(e.value.shape()), lo,
                 total / static_cast<double>(values.size()), hi);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: tapegrad-inspect FILE\n  prints a tapegrad checkpoint's header, entries and metadata,\n"
                 "  the tensors of a PyTorch (.pt) or safetensors file, or an ONNX model (.onnx): its inputs,\n"
                 "  outputs, opset, node counts by op and initializers\n");
    return argc == 2 ? 0 : 2;
  }
  const std::string path = argv[1];
  try {
    if (print_onnx_file(path) || print_foreign_file(path)) return 0;
    const CheckpointHeader header = read_checkpoint_header(path);
    const Checkpoint c = load_checkpoint(path);
    fmt::print("{}\n  format version {}, {} archive, payload {} bytes, crc32 {:08x}\n", path, header.format_version,
               header.kind == ArchiveKind::Binary ? "binary" : "text", header.payload_bytes, header.payload_crc32);
    fmt::print("  epoch {}, step {}\n", c.epoch, c.step);
    print_entries("model", c.model);
    print_entries("optimizer", c.optimizer);
    print_entries("scheduler", c.scheduler);
    if (!c.model_versions.empty()) {
      fmt::print("\nmodule state versions\n");
      for (const auto& [prefix, version] : c.model_versions)
        fmt::print("  {:<40} {}\n", prefix.empty() ? "<root>" : prefix, version);
    }
    if (!c.rng_states.empty()) {
      fmt::print("\ngenerator states\n");
      for (const auto& [name, state] : c.rng_states) fmt::print("  {:<40} {} bytes\n", name, state.size());
    }
    if (!c.metadata.empty()) {
      fmt::print("\nmetadata\n");
      for (const auto& [key, value] : c.metadata) fmt::print("  {:<40} {}\n", key, value);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tapegrad-inspect: %s\n", e.what());
    return 1;
  }
  return 0;
}
