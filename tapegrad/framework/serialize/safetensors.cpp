// safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON (parsed in safetensors_header.cpp), then the data, little-endian and row-major, offsets relative to its
// start. Loading into a module reads only the header until every entry has been checked against the module, then
// reads each tensor once, straight into a tensor of the module's dtype.
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <type_traits>

#include <tapegrad/framework/bfloat16.h>
#include <tapegrad/framework/detail/file_io.h>
#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/detail/safetensors_header.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace {

using detail::printable;
using safetensors::Entry;

// Widening goes through a scratch buffer of this many file bytes, so memory stays the destination plus this.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
// At most this many names are listed in a message about missing or unexpected keys.
constexpr std::size_t kNamesShown = 20;

// The header's length from the file's first 8 bytes, checked against the bytes after it and the format's limit.
std::uint64_t header_length(const char* first8, std::uint64_t file_bytes, const std::string& source) {
  std::uint64_t length = 0;
  std::memcpy(&length, first8, sizeof length);
  if (length > file_bytes - 8)
    fail("{}: header length {} at offset 0 exceeds the {} bytes after it", source, length, file_bytes - 8);
  if (length > safetensors::kMaxHeaderBytes)
    fail("{}: header length {} at offset 0 exceeds the format's limit of {} bytes", source, length,
         safetensors::kMaxHeaderBytes);
  return length;
}

std::string describe(const Entry* entry) {
  return entry == nullptr ? std::string("the header") : fmt::format("tensor '{}'", printable(entry->name));
}

// Reads exactly `bytes` at file offset `offset`. The sizes were checked against the file's size at open, so a
// short read means the file shrank since; both that and a read error name the path and the tensor.
void pread_exact(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& path,
                 const Entry* entry) {
  auto* p = static_cast<char*>(out);
  const std::uint64_t first = offset, last = offset + bytes;
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, std::min<std::size_t>(bytes, std::size_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      fail("{}: reading {} (file bytes {} to {}) failed at byte {}: {}", path, describe(entry), first, last, offset,
           std::strerror(errno));
    if (n == 0)
      fail("{}: reading {} (file bytes {} to {}): the file ends at byte {}; it shrank while being read", path,
           describe(entry), first, last, offset);
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

// Stores n widened values into the destination's dtype, as Tensor::to does; an int64 destination takes only
// whole numbers from floating data, as load_foreign_state requires.
template <class To, class From>
void store(To* out, const From* in, std::int64_t n, const std::string& path, const Entry& entry) {
  if constexpr (std::is_same_v<From, BFloat16> && !std::is_same_v<To, BFloat16>) {
    std::vector<float> wide(static_cast<std::size_t>(n));  // a chunk: exact, then as a float32 file's values
    for (std::int64_t i = 0; i < n; ++i) wide[static_cast<std::size_t>(i)] = bfloat16_to_float(in[i]);
    store(out, wide.data(), n, path, entry);
  } else if constexpr (std::is_same_v<To, std::int64_t> && std::is_floating_point_v<From>) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = in[i];
      if (!(v >= -9.2e18 && v <= 9.2e18) || v != static_cast<double>(static_cast<std::int64_t>(v)))
        fail("{}: tensor '{}' holds {} where the model's int64 entry needs whole numbers", path,
             printable(entry.name), v);
      out[i] = static_cast<std::int64_t>(v);
    }
  } else if constexpr (std::is_same_v<To, From>) {
    std::memcpy(out, in, static_cast<std::size_t>(n) * sizeof(To));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = bfloat16_from_float(static_cast<float>(in[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<To>(in[i]);
  }
}

template <class From>
void store_into(Tensor& target, std::int64_t at, const Tensor& wide, const std::string& path, const Entry& entry) {
  const From* in = wide.data<From>();
  switch (target.dtype()) {
    case DType::Float32: store(target.data<float>() + at, in, wide.numel(), path, entry); break;
    case DType::Float64: store(target.data<double>() + at, in, wide.numel(), path, entry); break;
    case DType::Int64: store(target.data<std::int64_t>() + at, in, wide.numel(), path, entry); break;
    case DType::BFloat16: store(target.data<BFloat16>() + at, in, wide.numel(), path, entry); break;
  }
}

// One tensor's data into `target` (the entry's shape, the module's dtype). The file's own layout, when it is the
// target's, is read in place; anything else goes through a bounded scratch buffer, widened chunk by chunk.
void read_tensor(int fd, const Entry& entry, std::uint64_t data_start, Tensor& target, const std::string& path) {
  const std::uint64_t offset = data_start + entry.begin;
  const std::size_t bytes = static_cast<std::size_t>(entry.end - entry.begin);
  if (bytes == 0) return;
  if (entry.element == foreign::element_of(target.dtype())) {
    pread_exact(fd, target.raw_data(), bytes, offset, path, &entry);
    return;
  }
  const std::size_t size = foreign::element_bytes(entry.element);
  const std::int64_t numel = target.numel(), chunk = static_cast<std::int64_t>(kChunkBytes / size);
  std::vector<char> scratch(std::min(bytes, static_cast<std::size_t>(chunk) * size));
  for (std::int64_t at = 0; at < numel; at += chunk) {
    const std::int64_t n = std::min(chunk, numel - at);
    pread_exact(fd, scratch.data(), static_cast<std::size_t>(n) * size, offset + static_cast<std::uint64_t>(at) * size,
                path, &entry);
    const Tensor wide = foreign::decode_strided(scratch.data(), entry.element, {n}, {1}, 0);
    switch (wide.dtype()) {
      case DType::Float32: store_into<float>(target, at, wide, path, entry); break;
      case DType::Float64: store_into<double>(target, at, wide, path, entry); break;
      case DType::Int64: store_into<std::int64_t>(target, at, wide, path, entry); break;
      case DType::BFloat16: store_into<BFloat16>(target, at, wide, path, entry); break;
    }
  }
}

std::string name_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < kNamesShown; ++i) out += (i > 0 ? ", " : "") + printable(names[i]);
  if (names.size() > kNamesShown) out += fmt::format(" and {} more", names.size() - kNamesShown);
  return out;
}

// The module's tensor for each entry (undefined for an entry the module lacks), after checking, before any data
// is read, everything the header alone can tell: shapes, and in strict mode missing and unexpected keys (the
// tapegrad-only buffers may be absent, as load_foreign_state treats them). An int64 destination for floating
// data is left to read_tensor, which needs the values.
std::vector<Tensor> match_module(const nn::Module& module, const std::vector<Entry>& entries, bool strict,
                                 const std::string& path) {
  std::map<std::string, Tensor, std::less<>> expected;
  for (auto& [name, tensor] : module.state()) expected.emplace(name, tensor);
  std::vector<Tensor> targets(entries.size());
  std::vector<std::string_view> unexpected;
  std::set<std::string_view> found;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const auto it = expected.find(e.name);
    if (it == expected.end()) {
      unexpected.push_back(e.name);
      continue;
    }
    if (it->second.shape() != e.shape)
      fail("{}: size mismatch for {}: file {} ({}), model {}", path, printable(e.name), shape_string(e.shape),
           safetensors::code_of(e.element), shape_string(it->second.shape()));
    targets[i] = it->second;
    found.insert(e.name);
  }
  if (!strict) return targets;  // load_foreign_state reports the missing and unexpected keys
  std::vector<std::string_view> missing;
  const nn::NamedTensors torch_visible = pytorch_state(module);
  for (const auto& [name, tensor] : torch_visible)
    if (!found.count(name)) missing.push_back(name);
  if (!missing.empty())
    fail("{}: missing key{} {}", path, missing.size() > 1 ? "s" : "", name_list(missing));
  if (!unexpected.empty())
    fail("{}: unexpected key{} {}", path, unexpected.size() > 1 ? "s" : "", name_list(unexpected));
  return targets;
}

}  // namespace

std::vector<ForeignTensor> read_safetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) fail("{}: {} bytes is too short for a safetensors file", source, bytes.size());
  const Entry* current = nullptr;
  try {
    const std::uint64_t header_bytes = header_length(bytes.data(), bytes.size(), source);
    const std::vector<Entry> entries =
        safetensors::parse_header(bytes.substr(8, static_cast<std::size_t>(header_bytes)), source);
    safetensors::check_tiling(entries, bytes.size() - 8 - header_bytes, source);
    const char* data = bytes.data() + 8 + header_bytes;
    std::vector<ForeignTensor> out;
    out.reserve(entries.size());
    for (const Entry& e : entries) {
      current = &e;
      ForeignTensor t;
      t.name = e.name;
      t.stored_dtype = foreign::element_name(e.element);
      t.value = foreign::decode_strided(data + e.begin, e.element, e.shape, contiguous_strides(e.shape), 0);
      out.push_back(std::move(t));
    }
    return out;
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory decoding {}{}", source, describe(current),
         current ? fmt::format(" ({} bytes in the file)", current->end - current->begin) : "");
  }
}

nn::LoadResult load_safetensors(nn::Module& module, const std::string& path, bool strict) {
  std::string doing = "the header";  // what was being allocated, for an out-of-memory message
  std::uint64_t doing_bytes = 0;
  try {
    detail::RegularFile file(path, "load_safetensors");
    if (file.size() < 8) fail("{}: {} bytes is too short for a safetensors file", path, file.size());
    char first8[8];
    pread_exact(file.fd(), first8, sizeof first8, 0, path, nullptr);
    const std::uint64_t header_bytes = header_length(first8, file.size(), path);
    doing_bytes = header_bytes;
    std::vector<Entry> entries;
    {
      std::string header(static_cast<std::size_t>(header_bytes), '\0');
      pread_exact(file.fd(), header.data(), header.size(), 8, path, nullptr);
      entries = safetensors::parse_header(header, path);
    }
    const std::uint64_t data_start = 8 + header_bytes;
    safetensors::check_tiling(entries, file.size() - data_start, path);
    const std::vector<Tensor> targets = match_module(module, entries, strict, path);

    // Note: every check the header allows has passed. Int64 entries from floating data still need whole numbers,
    // so they are read first, into fresh tensors; the module is untouched if one fails. Every other entry is then
    // read straight into the module's own storage: its pages are already mapped, where a fresh tensor's first
    // touch costs a page fault per 4 KiB (that made loading several times slower than the disk), and there is
    // no second copy. What can still fail then is only the reading itself (an I/O error, a file truncated
    // since it was opened), and that leaves the entries read so far loaded.
    std::vector<ForeignTensor> tensors(entries.size());
    std::vector<bool> direct(entries.size(), false);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      tensors[i].name = e.name;
      tensors[i].stored_dtype = foreign::element_name(e.element);
      if (!targets[i].defined()) continue;  // not the module's: never read (load_state only lists its name)
      const bool checked = targets[i].dtype() == DType::Int64 && is_floating(foreign::widened_dtype(e.element));
      direct[i] = !checked && targets[i].is_contiguous();
      if (direct[i]) continue;
      doing = describe(&e);
      doing_bytes = static_cast<std::uint64_t>(shape_numel(e.shape)) * element_size(targets[i].dtype());
      Tensor value = empty(e.shape, targets[i].dtype());
      read_tensor(file.fd(), e, data_start, value, path);
      tensors[i].value = std::move(value);
    }
    // A file truncated since it was opened is refused here, before the module is written to.
    struct stat now {};
    if (::fstat(file.fd(), &now) == 0 && static_cast<std::uint64_t>(now.st_size) < file.size())
      fail("{}: the file shrank from {} to {} bytes while being read", path, file.size(), now.st_size);
    std::size_t written = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!direct[i]) continue;
      Tensor target = targets[i];
      doing = describe(&entries[i]);
      doing_bytes = entries[i].end - entries[i].begin;
      try {
        read_tensor(file.fd(), entries[i], data_start, target, path);
      } catch (const Error& e) {
        fail("{}; the model is left partly loaded ({} of its entries read before this one)", e.what(), written);
      }
      tensors[i].value = target;
      ++written;
    }
    doing = "the module's state";
    doing_bytes = 0;
    return load_foreign_state(module, tensors, strict, path);
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory reading {} ({} bytes)", path, doing, doing_bytes);
  }
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
    header[name] = {{"dtype", safetensors::code_of(foreign::element_of(t.dtype()))},
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
