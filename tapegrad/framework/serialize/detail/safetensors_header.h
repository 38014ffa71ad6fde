#pragma once
// Internal: a safetensors JSON header parsed as a stream of SAX events into its tensor entries (no JSON DOM).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tapegrad/framework/serialize/detail/foreign.h>

namespace tapegrad::safetensors {

/// The reference implementation refuses headers above 100 MB; so does this one.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
/// Deepest JSON nesting accepted anywhere in a header (a real one nests 3 deep: header, tensor, shape).
constexpr std::size_t kMaxDepth = 64;
/// Most extents a shape may have.
constexpr std::size_t kMaxDims = 64;

/// One tensor the header declares; begin and end are offsets into the data that follows the header.
struct Entry {
  std::string name;
  foreign::Element element{};
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

/// The header's tensors in file order, each checked on its own (dtype known, shape of at most kMaxDims
/// non-negative extents below 2^63, data_offsets [begin, end] holding exactly the shape's bytes), with names
/// unique. `__metadata__`, if present, must be an object of strings; it is checked, not kept. Linear in the
/// header's size (sorting the names for duplicates aside), with nesting limited to kMaxDepth on every value.
/// Errors name `source`, the tensor and what is wrong, with every string from the file escaped.
std::vector<Entry> parse_header(std::string_view json, const std::string& source);

/// Checks that the entries tile `data_bytes` exactly (no overlap, no gap, nothing after the last), so no entry
/// can reach past the data.
void check_tiling(const std::vector<Entry>& entries, std::uint64_t data_bytes, const std::string& source);

/// The format's code for an element type: "F32", "BOOL", ...
const char* code_of(foreign::Element element);

}  // namespace tapegrad::safetensors
