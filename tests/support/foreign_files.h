#pragma once
// Builders for PyTorch (.pt) and safetensors files written byte by byte: zip records by hand (zlib deflates and
// checksums), pickles opcode by opcode, safetensors headers as text. A test sets every field a reader trusts
// (claimed sizes, duplicate names, nesting, counts), and a file that inflates to a gigabyte costs a few
// milliseconds to write: deflate_repeated compresses one chunk and repeats its output.
// Used by tests/test_hostile_foreign.cpp and fuzz/make_seeds.cpp (which reach zlib through tapegrad_internal).
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tapegrad::testing::foreign_files {

/// Raw deflate data (as a zip entry holds it) with the CRC-32 and size of what it inflates to.
struct Deflated {
  std::string bytes;
  std::uint32_t crc = 0;
  std::uint64_t size = 0;
};

namespace detail {

// One chunk compressed from a fresh state and ended with a full flush: byte-aligned, with no history, so the same
// bytes can follow themselves any number of times in one stream.
inline std::string deflate_piece(const std::string& chunk, int level, int flush) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, chunk.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
  z.avail_in = static_cast<uInt>(chunk.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, flush);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (status != Z_OK && status != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

inline void put16(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
inline void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

}  // namespace detail

/// Deflates the concatenation of `parts`, each a chunk and how many times it repeats.
inline Deflated deflate_parts(const std::vector<std::pair<std::string, std::uint64_t>>& parts, int level = 9) {
  Deflated out;
  for (const auto& [chunk, count] : parts) {
    if (count == 0 || chunk.empty()) continue;
    const std::string piece = detail::deflate_piece(chunk, level, Z_FULL_FLUSH);
    const uLong chunk_crc = crc32(0L, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(chunk.size()));
    for (std::uint64_t i = 0; i < count; ++i) {
      out.bytes += piece;
      out.crc = static_cast<std::uint32_t>(crc32_combine(out.crc, chunk_crc, static_cast<z_off_t>(chunk.size())));
    }
    out.size += chunk.size() * count;
  }
  out.bytes += detail::deflate_piece("", level, Z_FINISH);  // the final (empty) block
  return out;
}
inline Deflated deflate_repeated(const std::string& chunk, std::uint64_t count, int level = 9) {
  return deflate_parts({{chunk, count}}, level);
}

/// One zip entry as its headers describe it; `size` and `crc` are what the headers claim, true or not.
struct ZipEntry {
  std::string name;
  std::string stored;        // the bytes in the archive (compressed when method is 8)
  std::uint16_t method = 0;  // 0 stored, 8 deflated
  std::uint32_t crc = 0;
  std::uint64_t size = 0;            // uncompressed size; 0xFFFFFFFF or more is written as 0xFFFFFFFF (no zip64)
  bool sizes_all_ones = false;       // both sizes written as 0xFFFFFFFF without a zip64 extra field
};

inline ZipEntry stored_entry(std::string name, const std::string& data) {
  ZipEntry e{std::move(name), data, 0, 0, data.size(), false};
  e.crc = static_cast<std::uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  return e;
}
inline ZipEntry deflated_entry(std::string name, Deflated data) {
  return ZipEntry{std::move(name), std::move(data.bytes), 8, data.crc, data.size, false};
}
inline ZipEntry deflated_entry(std::string name, const std::string& data) {
  return deflated_entry(std::move(name), deflate_parts({{data, 1}}, 6));
}

/// A zip archive of `entries` in order: local headers and data, central directory, end record.
inline std::string zip_archive(const std::vector<ZipEntry>& entries) {
  using detail::put16;
  using detail::put32;
  std::string out, central;
  for (const ZipEntry& e : entries) {
    const std::uint32_t offset = static_cast<std::uint32_t>(out.size());
    const std::uint32_t comp = e.sizes_all_ones ? 0xffffffffu : static_cast<std::uint32_t>(e.stored.size());
    const std::uint32_t size = e.sizes_all_ones || e.size >= 0xffffffffu ? 0xffffffffu : static_cast<std::uint32_t>(e.size);
    auto common = [&](std::string& to) {  // version needed .. extra length
      put16(to, 20);
      put16(to, 0);
      put16(to, e.method);
      put16(to, 0);     // time
      put16(to, 0x21);  // date: 1980-01-01
      put32(to, e.crc);
      put32(to, comp);
      put32(to, size);
      put16(to, static_cast<std::uint32_t>(e.name.size()));
      put16(to, 0);
    };
    put32(out, 0x04034b50);
    common(out);
    out += e.name;
    out += e.stored;
    put32(central, 0x02014b50);
    put16(central, 20);  // version made by
    common(central);
    put16(central, 0);  // comment length
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0);  // external attributes
    put32(central, offset);
    central += e.name;
  }
  const std::uint32_t directory_at = static_cast<std::uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put32(out, static_cast<std::uint32_t>(central.size()));
  put32(out, directory_at);
  put16(out, 0);
  return out;
}

/// A pickle written opcode by opcode (protocol 2, the opcodes torch.save's data.pkl uses).
class Pickle {
 public:
  Pickle() { out_ = "\x80\x02"; }
  Pickle& op(char c) {
    out_ += c;
    return *this;
  }
  Pickle& raw(const std::string& bytes) {
    out_ += bytes;
    return *this;
  }
  Pickle& string(const std::string& s) {  // BINUNICODE
    out_ += 'X';
    detail::put32(out_, static_cast<std::uint32_t>(s.size()));
    out_ += s;
    return *this;
  }
  Pickle& integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else {  // LONG1 of 8 bytes
      out_ += "\x8a\x08";
      for (int i = 0; i < 8; ++i) out_ += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
    }
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) { return op('c').raw(module + "\n" + name + "\n"); }
  Pickle& ints(const std::vector<std::int64_t>& values) {  // a tuple of ints
    op('(');
    for (const std::int64_t v : values) integer(v);
    return op('t');
  }
  std::string finish() { return out_ + "."; }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

/// One state-dict entry: a strided view of a storage record.
struct TensorRef {
  std::string key;
  std::string storage;  // the record name under <prefix>data/
  std::int64_t storage_numel = 0;
  std::vector<std::int64_t> size, stride;
  std::int64_t offset = 0;
  std::string storage_type = "FloatStorage";
};

/// Appends torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()) to `p`.
inline void rebuild_tensor(Pickle& p, const TensorRef& t) {
  p.global("torch._utils", "_rebuild_tensor_v2").op('(');
  p.op('(').string("storage").global("torch", t.storage_type).string(t.storage).string("cpu").integer(t.storage_numel);
  p.op('t').op('Q');  // BINPERSID
  p.integer(t.offset).ints(t.size).ints(t.stride).op('\x89');
  p.global("collections", "OrderedDict").op(')').op('R');
  p.op('t').op('R');
}

/// data.pkl of torch.save(state_dict) for `tensors`, SETITEMS in batches of 1000 as pickle writes them.
inline std::string state_dict_pickle(const std::vector<TensorRef>& tensors) {
  Pickle p;
  p.op('}');
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i % 1000 == 0) p.op('(');
    p.string(tensors[i].key);
    rebuild_tensor(p, tensors[i]);
    if (i % 1000 == 999 || i + 1 == tensors.size()) p.op('u');
  }
  return p.finish();
}

/// Contiguous strides of `size`.
inline std::vector<std::int64_t> contiguous(const std::vector<std::int64_t>& size) {
  std::vector<std::int64_t> stride(size.size(), 1);
  for (std::size_t d = size.size(); d-- > 1;) stride[d - 1] = stride[d] * size[d];
  return stride;
}

/// The state of Sequential(Linear(4, 3), BatchNorm1d(3), Dropout(0.5)) as torch.save lays it out: one storage
/// record per tensor, named "0" to "6".
inline std::vector<TensorRef> small_model_tensors() {
  std::vector<TensorRef> out;
  const std::pair<const char*, std::vector<std::int64_t>> entries[] = {
      {"0.weight", {3, 4}}, {"0.bias", {3}},         {"1.weight", {3}},           {"1.bias", {3}},
      {"1.running_mean", {3}}, {"1.running_var", {3}}, {"1.num_batches_tracked", {}}};
  for (const auto& [key, size] : entries) {
    std::int64_t numel = 1;
    for (const std::int64_t s : size) numel *= s;
    TensorRef t{key, std::to_string(out.size()), numel, size, contiguous(size), 0, "FloatStorage"};
    if (t.size.empty()) t.storage_type = "LongStorage";
    out.push_back(std::move(t));
  }
  return out;
}

/// Storage bytes for `t`: its elements, all 1.0 (float) or 1 (int64).
inline std::string storage_bytes(const TensorRef& t) {
  std::string out;
  for (std::int64_t i = 0; i < t.storage_numel; ++i)
    if (t.storage_type == "LongStorage") {
      const std::int64_t one = 1;
      out.append(reinterpret_cast<const char*>(&one), 8);
    } else {
      const float one = 1.0f;
      out.append(reinterpret_cast<const char*>(&one), 4);
    }
  return out;
}

/// A torch.save archive: <prefix>data.pkl, then `records` (names relative to <prefix>), then <prefix>version
/// ("3\n", unless `records` has one).
inline std::string torch_zip(ZipEntry pickle, std::vector<ZipEntry> records, const std::string& prefix = "archive/") {
  std::vector<ZipEntry> entries;
  pickle.name = prefix + "data.pkl";
  entries.push_back(std::move(pickle));
  for (ZipEntry& r : records) {
    r.name = prefix + r.name;
    entries.push_back(std::move(r));
  }
  bool has_version = false;
  for (const ZipEntry& e : entries) has_version = has_version || e.name == prefix + "version";
  if (!has_version) entries.push_back(stored_entry(prefix + "version", "3\n"));
  return zip_archive(entries);
}

/// The small model's .pt file, every record stored; `replace` swaps in other records by name (e.g. "data/0").
inline std::string small_model_pt(const std::vector<ZipEntry>& replace = {}, const std::string& pickle = "") {
  const auto tensors = small_model_tensors();
  std::vector<ZipEntry> records;
  for (const TensorRef& t : tensors) records.push_back(stored_entry("data/" + t.storage, storage_bytes(t)));
  for (const ZipEntry& r : replace) {
    bool found = false;
    for (ZipEntry& existing : records)
      if (existing.name == r.name) {
        existing = r;
        found = true;
      }
    if (!found) records.push_back(r);
  }
  return torch_zip(stored_entry("", pickle.empty() ? state_dict_pickle(tensors) : pickle), std::move(records));
}

/// A safetensors file: the 8-byte little-endian header length, the header (padded to 8 bytes), the data.
inline std::string safetensors_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  detail::put32(out, static_cast<std::uint32_t>(header.size()));
  detail::put32(out, static_cast<std::uint32_t>(static_cast<std::uint64_t>(header.size()) >> 32));
  return out + header + data;
}

/// One safetensors header entry, "name":{...}, with a trailing comma when `comma`.
inline std::string safetensors_entry(const std::string& name, const std::string& dtype, const std::string& shape,
                                     std::uint64_t begin, std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

/// "[3,4]" for {3, 4}.
inline std::string shape_text(const std::vector<std::int64_t>& size) {
  std::string out = "[";
  for (std::size_t d = 0; d < size.size(); ++d) out += (d ? "," : "") + std::to_string(size[d]);
  return out + "]";
}

/// The small model's tensors as safetensors header entries (no braces) and their data: all float 1.0 / int 1.
inline std::pair<std::string, std::string> small_model_safetensors_entries() {
  std::string header, data;
  for (const TensorRef& t : small_model_tensors()) {
    const std::string bytes = storage_bytes(t);
    if (!header.empty()) header += ",";
    header += safetensors_entry(t.key, t.storage_type == "LongStorage" ? "I64" : "F32", shape_text(t.size), data.size(),
                                data.size() + bytes.size());
    data += bytes;
  }
  return {header, data};
}

}  // namespace tapegrad::testing::foreign_files
