// What the PyTorch and safetensors formats share: element decoding, whole-file I/O, format sniffing, and loading
// foreign tensors into a module (dtype conversion, tapegrad-only buffers) through Module::load_state.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/detail/file_io.h>
#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace foreign {

std::size_t element_bytes(Element element) {
  switch (element) {
    case Element::Float16:
    case Element::BFloat16:
    case Element::Int16: return 2;
    case Element::Float32:
    case Element::Int32: return 4;
    case Element::Float64:
    case Element::Int64: return 8;
    case Element::Int8:
    case Element::UInt8:
    case Element::Bool: return 1;
  }
  return 1;
}

const char* element_name(Element element) {
  switch (element) {
    case Element::Float16: return "float16";
    case Element::BFloat16: return "bfloat16";
    case Element::Float32: return "float32";
    case Element::Float64: return "float64";
    case Element::Int64: return "int64";
    case Element::Int32: return "int32";
    case Element::Int16: return "int16";
    case Element::Int8: return "int8";
    case Element::UInt8: return "uint8";
    case Element::Bool: return "bool";
  }
  return "?";
}

DType widened_dtype(Element element) {
  switch (element) {
    case Element::BFloat16: return DType::BFloat16;  // kept bit for bit
    case Element::Float16:
    case Element::Float32: return DType::Float32;
    case Element::Float64: return DType::Float64;
    default: return DType::Int64;
  }
}

Element element_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return Element::Float32;
    case DType::Float64: return Element::Float64;
    case DType::Int64: break;
    case DType::BFloat16: return Element::BFloat16;
  }
  return Element::Int64;
}

namespace {

// IEEE binary16 -> binary32, exactly (every half is a float), subnormals and NaN payloads included.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  } else {
    bits = sign;
  }
  float out = 0;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// bfloat16 is the upper half of a binary32.
float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float out = 0;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

template <class Stored>
Stored load_le(const char* p) {
  // Note: the formats are little-endian and so is every machine tapegrad builds for (checkpoint.cpp's header
  // insists on it too); a byte copy keeps unaligned storages legal.
  Stored value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <class Out>
Out read_one(const char* p, Element element) {
  switch (element) {
    case Element::Float16: return static_cast<Out>(half_to_float(load_le<std::uint16_t>(p)));
    case Element::BFloat16: return static_cast<Out>(bfloat16_to_float(load_le<std::uint16_t>(p)));
    case Element::Float32: return static_cast<Out>(load_le<float>(p));
    case Element::Float64: return static_cast<Out>(load_le<double>(p));
    case Element::Int64: return static_cast<Out>(load_le<std::int64_t>(p));
    case Element::Int32: return static_cast<Out>(load_le<std::int32_t>(p));
    case Element::Int16: return static_cast<Out>(load_le<std::int16_t>(p));
    case Element::Int8: return static_cast<Out>(load_le<std::int8_t>(p));
    case Element::UInt8: return static_cast<Out>(load_le<std::uint8_t>(p));
    case Element::Bool: return static_cast<Out>(*p != 0 ? 1 : 0);
  }
  return Out{};
}

// Note: any other element reaches bfloat16 through float, as torch's conversions do (c10::BFloat16 is built
// from a float, so a double is rounded twice there too).
template <>
BFloat16 read_one<BFloat16>(const char* p, Element element) {
  if (element == Element::BFloat16) return BFloat16{load_le<std::uint16_t>(p)};
  return bfloat16_from_float(read_one<float>(p, element));
}

template <class Out>
void decode_into(Out* out, const char* bytes, Element element, const Shape& shape, const Shape& strides,
                 std::int64_t offset) {
  const std::int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  const auto size = static_cast<std::int64_t>(element_bytes(element));
  std::vector<std::int64_t> index(shape.size(), 0);
  std::int64_t position = offset;  // element index into the storage of the current multi-index
  for (std::int64_t i = 0; i < numel; ++i) {
    out[i] = read_one<Out>(bytes + position * size, element);
    for (std::size_t d = shape.size(); d-- > 0;) {  // odometer: the last dim moves fastest
      if (++index[d] < shape[d]) {
        position += strides[d];
        break;
      }
      position -= (shape[d] - 1) * strides[d];
      index[d] = 0;
    }
  }
}

template <class Out>
void decode_run(Out* out, const char* bytes, Element element, std::int64_t count) {
  // Note: the same bits need no conversion; a memcpy runs at memory speed where read_one's switch does not.
  if (element == element_of(dtype_of<Out>())) {
    std::memcpy(out, bytes, static_cast<std::size_t>(count) * sizeof(Out));
    return;
  }
  const auto size = static_cast<std::int64_t>(element_bytes(element));
  for (std::int64_t i = 0; i < count; ++i) out[i] = read_one<Out>(bytes + i * size, element);
}

}  // namespace

void decode_contiguous(const char* bytes, Element element, std::int64_t count, Tensor& out, std::int64_t at) {
  switch (out.dtype()) {
    case DType::Float32: decode_run(out.data<float>() + at, bytes, element, count); break;
    case DType::Float64: decode_run(out.data<double>() + at, bytes, element, count); break;
    case DType::Int64: decode_run(out.data<std::int64_t>() + at, bytes, element, count); break;
    case DType::BFloat16: decode_run(out.data<BFloat16>() + at, bytes, element, count); break;
  }
}

Tensor decode_strided(const char* bytes, Element element, const Shape& shape, const Shape& strides,
                      std::int64_t offset) {
  Tensor out = empty(shape, widened_dtype(element));
  if (is_contiguous_layout(shape, strides)) {
    decode_contiguous(bytes + offset * static_cast<std::int64_t>(element_bytes(element)), element, out.numel(), out, 0);
    return out;
  }
  switch (out.dtype()) {
    case DType::Float32: decode_into(out.data<float>(), bytes, element, shape, strides, offset); break;
    case DType::Float64: decode_into(out.data<double>(), bytes, element, shape, strides, offset); break;
    case DType::Int64: decode_into(out.data<std::int64_t>(), bytes, element, shape, strides, offset); break;
    case DType::BFloat16: decode_into(out.data<BFloat16>(), bytes, element, shape, strides, offset); break;
  }
  return out;
}

std::string read_whole_file(const std::string& path, const char* what) {
  detail::RegularFile file(path, what);  // a FIFO or device is refused without blocking
  std::string bytes(static_cast<std::size_t>(file.size()), '\0');
  const std::size_t done = file.read_some(bytes.data(), bytes.size());
  if (done < bytes.size()) fail("{}: reading {} failed after {} bytes: file shrank", what, path, done);
  return bytes;
}

void write_file_atomically(const std::string& path, const char* what, const std::function<bool(std::FILE*)>& write) {
  detail::replace_file(path, what, write);
}

std::optional<nn::LoadResult> load_if_foreign(nn::Module& module, const std::string& path, bool strict) {
  switch (sniff_state_format_of_file(path)) {
    case StateFormat::PyTorch:
    case StateFormat::PyTorchLegacy: return load_pytorch(module, path, strict);  // the latter names the format
    case StateFormat::Safetensors: return load_safetensors(module, path, strict);
    default: return std::nullopt;
  }
}

}  // namespace foreign

StateFormat sniff_state_format(std::string_view bytes) {
  if (bytes.substr(0, 8) == "TAPEGRAD") return StateFormat::Checkpoint;
  if (bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4)) return StateFormat::PyTorch;
  // A pickle's PROTO opcode and a protocol torch.save's legacy writer used (2) or could (up to 5).
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] >= 2 && bytes[1] <= 5)
    return StateFormat::PyTorchLegacy;
  // Note: safetensors has no magic; its header is JSON, so the byte after the 8-byte length is '{'. A length
  // of at least 2 and below 2^32 rules out most other files starting with '{' at offset 8.
  if (bytes.size() >= 9 && bytes[8] == '{') {
    std::uint64_t length = 0;
    std::memcpy(&length, bytes.data(), sizeof length);
    if (length >= 2 && length < (std::uint64_t{1} << 32)) return StateFormat::Safetensors;
  }
  return StateFormat::Unknown;
}

StateFormat sniff_state_format_of_file(const std::string& path) {
  try {
    detail::RegularFile file(path, "sniff");  // opening a FIFO plainly would block
    char head[16] = {};
    return sniff_state_format(std::string_view(head, file.read_some(head, sizeof head)));
  } catch (const Error&) {
    return StateFormat::Unknown;  // the caller's own open reports what is wrong with the path
  }
}

namespace {
// Note: the buffers tapegrad has and PyTorch's layers do not: BatchNorm's `frozen` flag and every buffer of a
// Dropout (its random stream; PyTorch's Dropout has no state). Known by the owning layer's type and the buffer's
// name, so a user's own buffer on another layer is still saved.
bool is_tapegrad_only(const std::string& type_name, const std::string& buffer) {
  if (type_name.find("Dropout") != std::string::npos) return true;
  return buffer == "frozen" && type_name.find("BatchNorm") != std::string::npos;
}

std::map<std::string, bool> tapegrad_only_keys(const nn::Module& module) {
  std::map<std::string, bool> keys;
  // named_modules() is non-const only because it hands out mutable pointers; nothing is changed here.
  for (auto& [prefix, child] : const_cast<nn::Module&>(module).named_modules())
    for (const auto& [name, tensor] : child->named_buffers(/*recurse=*/false))
      if (is_tapegrad_only(child->type_name(), name)) keys[prefix.empty() ? name : prefix + "." + name] = true;
  return keys;
}
}  // namespace

nn::NamedTensors pytorch_state(const nn::Module& module) {
  const auto skip = tapegrad_only_keys(module);
  std::map<std::string, Tensor> persistent;
  for (auto& [name, tensor] : module.state()) persistent.emplace(name, tensor);
  // Note: in state_dict()'s order: each module's parameters, then its buffers, module by module (state() lists
  // every parameter before any buffer).
  nn::NamedTensors out;
  for (auto& [prefix, child] : const_cast<nn::Module&>(module).named_modules())
    for (const nn::NamedTensors& own : {child->named_parameters(false), child->named_buffers(false)})
      for (const auto& [name, tensor] : own) {
        const std::string key = prefix.empty() ? name : prefix + "." + name;
        const auto it = persistent.find(key);
        if (it != persistent.end() && !skip.count(key)) out.emplace_back(key, it->second);
      }
  return out;
}

nn::LoadResult load_foreign_state(nn::Module& module, const std::vector<ForeignTensor>& tensors, bool strict,
                                  const std::string& source) {
  std::map<std::string, Tensor> expected;
  for (const auto& [name, tensor] : module.state()) expected.emplace(name, tensor);
  nn::NamedTensors entries;
  std::map<std::string, bool> present;
  for (const ForeignTensor& t : tensors) {
    present[t.name] = true;
    auto it = expected.find(t.name);
    // As load_state_dict's copy_: the module's dtype wins. Shapes (and unexpected keys) are load_state's to check.
    const bool convert = it != expected.end() && it->second.dtype() != t.value.dtype() &&
                         it->second.shape() == t.value.shape();
    if (convert && !is_floating(it->second.dtype()))
      for (const double v : t.value.to_vector())
        if (!(v >= -9.2e18 && v <= 9.2e18) || v != static_cast<double>(static_cast<std::int64_t>(v)))
          fail("{}: '{}' holds {} where the model's int64 entry needs whole numbers", source, detail::printable(t.name), v);
    entries.emplace_back(t.name, convert ? t.value.to(it->second.dtype()) : t.value);
  }
  for (const auto& [name, only] : tapegrad_only_keys(module))
    if (!present.count(name)) entries.emplace_back(name, expected.at(name).clone());
  try {
    return module.load_state(entries, strict);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}

}  // namespace tapegrad
