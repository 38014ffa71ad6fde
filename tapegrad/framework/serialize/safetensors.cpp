// safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the data, little-endian and row-major, offsets relative to its start. The JSON is nlohmann_json's.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace {

// The reference implementation refuses headers above 100 MB; so does this one.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeName {
  const char* code;
  foreign::Element element;
};
constexpr DtypeName kDtypes[] = {{"F16", foreign::Element::Float16}, {"BF16", foreign::Element::BFloat16},
                                 {"F32", foreign::Element::Float32}, {"F64", foreign::Element::Float64},
                                 {"I64", foreign::Element::Int64},   {"I32", foreign::Element::Int32},
                                 {"I16", foreign::Element::Int16},   {"I8", foreign::Element::Int8},
                                 {"U8", foreign::Element::UInt8},    {"BOOL", foreign::Element::Bool}};

foreign::Element element_of_code(const std::string& code, const std::string& where) {
  for (const DtypeName& d : kDtypes)
    if (code == d.code) return d.element;
  fail("{}: dtype '{}' is not one tapegrad reads (F16, BF16, F32, F64, I64, I32, I16, I8, U8, BOOL)", where, code);
}

const char* code_of(foreign::Element element) {
  for (const DtypeName& d : kDtypes)
    if (d.element == element) return d.code;
  return "?";
}

struct Entry {
  std::string name;
  foreign::Element element{};
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

std::uint64_t unsigned_of(const nlohmann::ordered_json& value, const std::string& where) {
  if (!value.is_number_unsigned()) fail("{}: expected a non-negative integer, got {}", where, value.dump());
  return value.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const nlohmann::ordered_json& info, const std::string& source) {
  const std::string where = fmt::format("{}: tensor '{}'", source, name);
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
    fail("{}: needs an object with dtype, shape and data_offsets", where);
  Entry e;
  e.name = name;
  if (!info["dtype"].is_string()) fail("{}: dtype is not a string", where);
  e.element = element_of_code(info["dtype"].get<std::string>(), where);
  const nlohmann::ordered_json& shape = info["shape"];
  const nlohmann::ordered_json& offsets = info["data_offsets"];
  if (!shape.is_array() || shape.size() > 64) fail("{}: shape is not an array of at most 64 extents", where);
  for (const auto& extent : shape) {
    const std::uint64_t x = unsigned_of(extent, where + " shape");
    if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail("{}: extent {} too large", where, x);
    e.shape.push_back(static_cast<std::int64_t>(x));
  }
  if (!offsets.is_array() || offsets.size() != 2) fail("{}: data_offsets is not [begin, end]", where);
  e.begin = unsigned_of(offsets[0], where + " data_offsets");
  e.end = unsigned_of(offsets[1], where + " data_offsets");
  const std::size_t bytes = checked_bytes(e.shape, foreign::element_bytes(e.element), where.c_str());
  if (e.end < e.begin || e.end - e.begin != bytes)
    fail("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where, e.begin, e.end,
         e.end < e.begin ? 0 : e.end - e.begin, shape_string(e.shape), code_of(e.element), bytes);
  return e;
}

}  // namespace

std::vector<ForeignTensor> read_safetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) fail("{}: {} bytes is too short for a safetensors file", source, bytes.size());
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), sizeof header_bytes);
  if (header_bytes > bytes.size() - 8 || header_bytes > kMaxHeaderBytes)
    fail("{}: header length {} at offset 0 exceeds the {} bytes after it", source, header_bytes, bytes.size() - 8);
  nlohmann::ordered_json header;  // ordered: entries keep the file's order
  try {
    header = nlohmann::ordered_json::parse(bytes.substr(8, static_cast<std::size_t>(header_bytes)));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the JSON header (bytes 8 to {}) is invalid: {}", source, 8 + header_bytes, e.what());
  }
  if (!header.is_object()) fail("{}: the JSON header is not an object", source);

  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail("{}: __metadata__ is not an object", source);
      for (const auto& [key, value] : info.items())
        if (!value.is_string()) fail("{}: __metadata__ '{}' is not a string", source, key);
      continue;
    }
    entries.push_back(parse_entry(name, info, source));
  }
  // Note: as the reference implementation, the entries must tile the data exactly: no overlap (two tensors
  // sharing bytes), no gap, nothing after the last. A file that passes cannot make a tensor read past its end.
  const std::uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != covered)
      fail("{}: tensor '{}' starts at data offset {} but the previous tensor ends at {} ({})", source, e->name,
           e->begin, covered, e->begin < covered ? "overlap" : "gap");
    covered = e->end;
  }
  if (covered != data_bytes)
    fail("{}: the tensors cover {} data bytes but the file holds {} after the header", source, covered, data_bytes);

  const char* data = bytes.data() + 8 + header_bytes;
  std::vector<ForeignTensor> out;
  for (const Entry& e : entries) {
    ForeignTensor t;
    t.name = e.name;
    t.stored_dtype = foreign::element_name(e.element);
    t.value = foreign::decode_strided(data + e.begin, e.element, e.shape, contiguous_strides(e.shape), 0);
    out.push_back(std::move(t));
  }
  return out;
}

nn::LoadResult load_safetensors(nn::Module& module, const std::string& path, bool strict) {
  const std::string bytes = foreign::read_whole_file(path, "load_safetensors");
  return load_foreign_state(module, read_safetensors(bytes, path), strict, path);
}

void save_safetensors(const nn::Module& module, const std::string& path) {
  nn::NamedTensors state = pytorch_state(module);
  for (auto& entry : state)  // a view is saved as its values, in row-major order
    if (!entry.second.is_contiguous()) entry.second = entry.second.detach().contiguous();
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t offset = 0;
  for (const auto& [name, t] : state) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * element_size(t.dtype());
    header[name] = {{"dtype", code_of(foreign::element_of(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Note: the header is padded with spaces to a multiple of 8, so the data (and every float64 in it) is 8-byte
  // aligned in the file, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t length = text.size();
  foreign::write_file_atomically(path, "save_safetensors", [&](std::FILE* file) {
    if (std::fwrite(&length, sizeof length, 1, file) != 1 || std::fwrite(text.data(), 1, text.size(), file) != text.size())
      return false;
    for (const auto& [name, t] : state) {
      const std::size_t bytes = static_cast<std::size_t>(t.numel()) * element_size(t.dtype());
      if (bytes > 0 && std::fwrite(t.raw_data(), 1, bytes, file) != bytes) return false;
    }
    return true;
  });
}

}  // namespace tapegrad
