// The checkpoint file: one text header line, then a Boost.Serialization archive (binary or text).
// Note: every Boost archive include of the project lives in this file, so public headers stay light.
//
// Layout:  TAPEGRAD <format> <binary|text> f4d8i8 le <payload bytes> <payload crc32>\n<payload>
// Note: archives are written with boost::archive::no_header. Boost's own header starts with a length-prefixed
// signature string that its loader allocates blindly, and our first line already says what the file is.
// Robustness: the whole file is read into memory and parsed from there. Every length read from the payload
// is checked against the bytes that are actually left before anything is allocated, so a corrupt length
// field cannot ask for a huge allocation; every tensor carries a CRC-32 of its bytes (so corruption names
// the entry), and the header carries one of the whole payload (so corruption anywhere is caught).
#include "framework/serialize/checkpoint.h"

#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string_view>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/archive/text_iarchive.hpp>
#include <boost/archive/text_oarchive.hpp>
#include <boost/iostreams/device/array.hpp>
#include <boost/iostreams/stream.hpp>
#include <boost/serialization/binary_object.hpp>
#include <boost/serialization/split_member.hpp>
#include <boost/serialization/version.hpp>

#include "framework/autograd/grad_mode.h"
#include "framework/detail/dispatch.h"
#include "framework/serialize/detail/foreign.h"

static_assert(std::endian::native == std::endian::little, "checkpoint CRCs assume a little-endian host");

namespace tapegrad {

namespace serialize_detail {

constexpr std::uint64_t kMaxNameBytes = 4096;
constexpr std::uint64_t kMaxDims = 16;
constexpr std::uint64_t kMaxHeaderBytes = 256;

std::uint32_t crc32_of(const void* data, std::size_t bytes, std::uint32_t crc = 0) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes 32-bit lengths
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

std::size_t data_bytes(const Tensor& t) { return static_cast<std::size_t>(t.numel()) * element_size(t.dtype()); }

std::uint32_t data_crc(const CheckpointEntry& entry) { return crc32_of(entry.value.raw_data(), data_bytes(entry.value)); }

// CRC-32 of name, dims and data, in that order (crc32_combine appends the data's own checksum exactly).
std::uint32_t entry_crc(const CheckpointEntry& entry, std::uint32_t data_checksum) {
  std::uint32_t crc = crc32_of(entry.name.data(), entry.name.size());
  const auto dims = entry.value.shape();
  crc = crc32_of(dims.data(), dims.size() * sizeof(std::int64_t), crc);
  return static_cast<std::uint32_t>(
      ::crc32_combine(crc, data_checksum, static_cast<z_off_t>(data_bytes(entry.value))));
}
std::uint32_t entry_crc(const CheckpointEntry& entry) { return entry_crc(entry, data_crc(entry)); }

// Note: a payload is never held in memory whole. Saving runs the archive twice over the checkpoint: first into
// a sink that only counts bytes and checksums them (the header line, which comes first, needs both), then
// straight into the destination. Tensor data reaches the sink as one large write, not copied in between.
class PayloadSink : public std::streambuf {
 public:
  explicit PayloadSink(std::FILE* file = nullptr, std::ostream* stream = nullptr, bool checksum = true)
      : file_(file), stream_(stream), checksum_(checksum) {
    setp(buffer_, buffer_ + sizeof(buffer_));
  }
  ~PayloadSink() override = default;
  /// Flushes what is buffered; false when the destination failed.
  bool finish() { return flush_buffer() && ok_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint32_t crc() const { return crc_; }
  /// Announces that the next write of exactly (data, count) has checksum `crc`, so it is not computed again.
  void expect(const void* data, std::size_t count, std::uint32_t crc) {
    hint_data_ = data;
    hint_count_ = count;
    hint_crc_ = crc;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* data, std::streamsize count) override {
    if (count < static_cast<std::streamsize>(sizeof(buffer_)) / 2 && epptr() - pptr() >= count) {
      std::memcpy(pptr(), data, static_cast<std::size_t>(count));
      pbump(static_cast<int>(count));
      return count;
    }
    if (!flush_buffer()) return 0;
    consume(data, static_cast<std::size_t>(count));
    return ok_ ? count : 0;
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool flush_buffer() {
    const auto pending = static_cast<std::size_t>(pptr() - pbase());
    if (pending > 0) consume(pbase(), pending);
    setp(buffer_, buffer_ + sizeof(buffer_));
    return ok_;
  }
  void consume(const char* data, std::size_t count) {
    bytes_ += count;
    if (checksum_ && data == hint_data_ && count == hint_count_) {
      crc_ = static_cast<std::uint32_t>(::crc32_combine(crc_, hint_crc_, static_cast<z_off_t>(count)));
      hint_data_ = nullptr;
    } else if (checksum_) {
      crc_ = crc32_of(data, count, crc_);
    }
    if (file_ && std::fwrite(data, 1, count, file_) != count) ok_ = false;
    if (stream_ && !stream_->write(data, static_cast<std::streamsize>(count))) ok_ = false;
  }
  std::FILE* file_;
  std::ostream* stream_;
  bool checksum_;
  bool ok_ = true;
  std::uint64_t bytes_ = 0;
  std::uint32_t crc_ = 0;
  const void* hint_data_ = nullptr;
  std::size_t hint_count_ = 0;
  std::uint32_t hint_crc_ = 0;
  char buffer_[1 << 16];
};

/// What one archive holds. The class version is the payload layout version (Boost's class versioning).
class Payload {
 public:
  const Checkpoint* source = nullptr;  // when saving
  Checkpoint* target = nullptr;        // when loading
  std::uint64_t budget = 0;            // payload bytes: no length read may exceed it
  std::string current = "<header>";    // what is being read, for error messages
  // Note: when the whole payload's checksum already matched, the per-entry ones cannot fail, so loading
  // skips them (one pass less over the data); they are checked when it did not, to name the damaged entry.
  bool verify_entries = true;
  // Saving runs twice over the same checkpoint (measure, then write); the entry checksums are computed once.
  // Per entry: the checksum of its data alone and of the whole entry.
  mutable std::vector<std::pair<std::uint32_t, std::uint32_t>> entry_crcs;
  PayloadSink* sink = nullptr;  // when saving into a sink that checksums (it is told the data's checksum)
  mutable std::size_t next_crc = 0;

  template <class Archive>
  void save(Archive& ar, unsigned /*version*/) const {
    const Checkpoint& c = *source;
    next_crc = 0;
    save_entries(ar, c.model);
    save_entries(ar, c.optimizer);
    save_entries(ar, c.scheduler);
    save_u64(ar, c.model_versions.size());
    for (const auto& [prefix, version] : c.model_versions) {
      save_string(ar, prefix);
      save_u64(ar, static_cast<std::uint64_t>(version));
    }
    save_u64(ar, static_cast<std::uint64_t>(c.epoch));
    save_u64(ar, static_cast<std::uint64_t>(c.step));
    save_map(ar, c.rng_states);
    save_map(ar, c.metadata);
  }

  template <class Archive>
  void load(Archive& ar, unsigned version) {
    if (version != 1) fail("payload layout version {} is not known to this build", version);
    Checkpoint& c = *target;
    current = "<model entries>";
    load_entries(ar, c.model);
    current = "<optimizer entries>";
    load_entries(ar, c.optimizer);
    current = "<scheduler entries>";
    load_entries(ar, c.scheduler);
    current = "<model versions>";
    const std::uint64_t versions = load_count(ar, 2);
    for (std::uint64_t i = 0; i < versions; ++i) {
      std::string prefix = load_string(ar, kMaxNameBytes);
      const std::uint64_t v = load_u64(ar);
      if (v > 1000000) fail("implausible state version {} for '{}'", v, prefix);
      c.model_versions[prefix] = static_cast<int>(v);
    }
    current = "<progress>";
    c.epoch = static_cast<std::int64_t>(load_u64(ar));
    c.step = static_cast<std::int64_t>(load_u64(ar));
    current = "<rng states>";
    load_map(ar, c.rng_states);
    current = "<metadata>";
    load_map(ar, c.metadata);
    current = "<end>";
  }
  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  template <class Archive>
  static constexpr bool is_binary = std::is_same_v<Archive, boost::archive::binary_oarchive> ||
                                    std::is_same_v<Archive, boost::archive::binary_iarchive>;

  template <class Archive>
  static void save_u64(Archive& ar, std::uint64_t v) {
    ar << v;
  }
  template <class Archive>
  static std::uint64_t load_u64(Archive& ar) {
    std::uint64_t v = 0;
    ar >> v;
    return v;
  }
  // A count of items each taking at least `min_bytes` in the payload.
  template <class Archive>
  std::uint64_t load_count(Archive& ar, std::uint64_t min_bytes) {
    const std::uint64_t n = load_u64(ar);
    if (n > budget / min_bytes) fail("corrupt count {} (the payload has only {} bytes)", n, budget);
    return n;
  }

  template <class Archive>
  static void save_string(Archive& ar, const std::string& s) {
    save_u64(ar, s.size());
    if constexpr (is_binary<Archive>) {
      if (!s.empty()) ar << boost::serialization::make_binary_object(const_cast<char*>(s.data()), s.size());
    } else {
      // Note: char by char, so that a text archive never sees a length it would trust blindly.
      for (char ch : s) ar << static_cast<unsigned>(static_cast<unsigned char>(ch));
    }
  }
  template <class Archive>
  std::string load_string(Archive& ar, std::uint64_t limit) {
    const std::uint64_t n = load_u64(ar);
    if (n > limit || n > budget) fail("corrupt string length {}", n);
    std::string s(n, '\0');
    if constexpr (is_binary<Archive>) {
      if (n > 0) ar >> boost::serialization::make_binary_object(s.data(), n);
    } else {
      for (auto& ch : s) {
        unsigned code = 0;
        ar >> code;
        if (code > 255) fail("corrupt character code {}", code);
        ch = static_cast<char>(code);
      }
    }
    return s;
  }

  template <class Archive>
  static void save_map(Archive& ar, const std::map<std::string, std::string>& map) {
    save_u64(ar, map.size());
    for (const auto& [key, value] : map) {
      save_string(ar, key);
      save_string(ar, value);
    }
  }
  template <class Archive>
  void load_map(Archive& ar, std::map<std::string, std::string>& map) {
    const std::uint64_t n = load_count(ar, 2);
    for (std::uint64_t i = 0; i < n; ++i) {
      std::string key = load_string(ar, kMaxNameBytes);
      map[key] = load_string(ar, budget);
    }
  }

  const std::pair<std::uint32_t, std::uint32_t>& cached_crcs(const CheckpointEntry& entry) const {
    if (next_crc == entry_crcs.size()) {
      const std::uint32_t data = data_crc(entry);
      entry_crcs.emplace_back(data, entry_crc(entry, data));
    }
    return entry_crcs[next_crc++];
  }

  template <class Archive>
  void save_entries(Archive& ar, const std::vector<CheckpointEntry>& entries) const {
    save_u64(ar, entries.size());
    for (const CheckpointEntry& entry : entries) {
      const Tensor& t = entry.value;
      save_string(ar, entry.name);
      save_u64(ar, static_cast<std::uint64_t>(entry.kind));
      save_u64(ar, static_cast<std::uint64_t>(t.dtype()));
      save_u64(ar, t.shape().size());
      for (auto extent : t.shape()) save_u64(ar, static_cast<std::uint64_t>(extent));
      const std::size_t bytes = data_bytes(t);
      const auto& [data_checksum, entry_checksum] = cached_crcs(entry);
      if constexpr (is_binary<Archive>) {
        if (sink) sink->expect(t.raw_data(), bytes, data_checksum);
        if (bytes > 0) ar << boost::serialization::make_binary_object(const_cast<void*>(t.raw_data()), bytes);
      } else {
        detail::dispatch_all(t.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* p = t.data<T>();
          // float32 goes through double: every float is exactly a double, and 17 digits round-trip it
          using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;
          for (std::int64_t i = 0; i < t.numel(); ++i) ar << static_cast<Wide>(p[i]);
        });
      }
      save_u64(ar, entry_checksum);
    }
  }

  template <class Archive>
  void load_entries(Archive& ar, std::vector<CheckpointEntry>& entries) {
    const std::uint64_t n = load_count(ar, 4);
    for (std::uint64_t i = 0; i < n; ++i) {
      CheckpointEntry entry;
      entry.name = load_string(ar, kMaxNameBytes);
      current = entry.name;
      const std::uint64_t kind = load_u64(ar), dtype = load_u64(ar), ndim = load_u64(ar);
      if (kind > static_cast<std::uint64_t>(EntryKind::Other)) fail("corrupt entry kind {}", kind);
      if (dtype > static_cast<std::uint64_t>(DType::Int64)) fail("corrupt dtype code {}", dtype);
      if (ndim > kMaxDims) fail("corrupt number of dims {}", ndim);
      entry.kind = static_cast<EntryKind>(kind);
      const auto type = static_cast<DType>(dtype);
      Shape shape;
      std::uint64_t elements = 1;
      for (std::uint64_t d = 0; d < ndim; ++d) {
        const std::uint64_t extent = load_u64(ar);
        if (extent > budget) fail("corrupt extent {}", extent);
        if (extent != 0 && elements > budget / extent) fail("corrupt shape (more elements than the payload holds)");
        elements *= extent;
        shape.push_back(static_cast<std::int64_t>(extent));
      }
      if (elements * element_size(type) > budget && is_binary<Archive>)
        fail("corrupt shape {} ({} bytes; the payload has {})", shape_string(shape), elements * element_size(type), budget);
      entry.value = empty(shape, type);
      const std::size_t bytes = static_cast<std::size_t>(elements) * element_size(type);
      if constexpr (is_binary<Archive>) {
        if (bytes > 0) ar >> boost::serialization::make_binary_object(entry.value.raw_data(), bytes);
      } else {
        detail::dispatch_all(type, [&](auto tag) {
          using T = decltype(tag);
          using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;
          T* p = entry.value.data<T>();
          for (std::uint64_t k = 0; k < elements; ++k) {
            Wide v{};
            ar >> v;
            p[k] = static_cast<T>(v);
          }
        });
      }
      const std::uint64_t crc = load_u64(ar);
      if (verify_entries && crc != entry_crc(entry)) fail("checksum mismatch: the entry's data is corrupt");
      entries.push_back(std::move(entry));
    }
  }
};

}  // namespace serialize_detail
}  // namespace tapegrad

BOOST_CLASS_VERSION(tapegrad::serialize_detail::Payload, 1)

namespace tapegrad {

using serialize_detail::Payload;
using serialize_detail::PayloadSink;

const char* entry_kind_name(EntryKind kind) {
  switch (kind) {
    case EntryKind::Parameter: return "parameter";
    case EntryKind::Buffer: return "buffer";
    case EntryKind::Optimizer: return "optimizer";
    case EntryKind::Scheduler: return "scheduler";
    case EntryKind::Other: break;
  }
  return "other";
}

// ---- Checkpoint helpers ----
void Checkpoint::set_model(const nn::Module& module) {
  model.clear();
  std::set<std::string> parameter_names;
  for (const auto& [name, p] : module.named_parameters()) parameter_names.insert(name);
  for (const auto& [name, t] : module.state())
    model.push_back({name, parameter_names.count(name) ? EntryKind::Parameter : EntryKind::Buffer, t});
  model_versions = module.state_versions();
}

nn::NamedTensors Checkpoint::as_named(const std::vector<CheckpointEntry>& entries) {
  nn::NamedTensors out;
  for (const auto& e : entries) out.emplace_back(e.name, e.value);
  return out;
}

nn::NamedTensors Checkpoint::model_state() const { return as_named(model); }

std::vector<CheckpointEntry> Checkpoint::from_named(const nn::NamedTensors& tensors, EntryKind kind) {
  std::vector<CheckpointEntry> out;
  for (const auto& [name, t] : tensors) out.push_back({name, kind, t.detach()});
  return out;
}

// ---- writing ----
namespace {

void encode_payload(Payload& payload, ArchiveKind kind, PayloadSink& sink) {
  payload.sink = &sink;
  if (kind == ArchiveKind::Binary) {
    boost::archive::binary_oarchive ar(sink, boost::archive::no_header);
    ar << static_cast<const Payload&>(payload);
  } else {
    std::ostream out(&sink);
    boost::archive::text_oarchive ar(out, boost::archive::no_header);
    ar << static_cast<const Payload&>(payload);
  }
}

std::string header_line(ArchiveKind kind, std::uint64_t payload_bytes, std::uint32_t payload_crc) {
  return fmt::format("TAPEGRAD {} {} f4d8i8 le {} {:08x}\n", kCheckpointFormatVersion,
                     kind == ArchiveKind::Binary ? "binary" : "text", payload_bytes, payload_crc);
}

// Measures the payload, writes the header line through `write_header`, then the payload into `destination`.
template <class WriteHeader>
bool write_checkpoint(const Checkpoint& checkpoint, ArchiveKind kind, WriteHeader&& write_header,
                      PayloadSink& destination) {
  Payload payload;
  payload.source = &checkpoint;
  PayloadSink measure;
  encode_payload(payload, kind, measure);
  measure.finish();
  if (!write_header(header_line(kind, measure.bytes(), measure.crc()))) return false;
  encode_payload(payload, kind, destination);
  if (!destination.finish()) return false;
  if (destination.bytes() != measure.bytes())
    fail("save_checkpoint: the payload came out {} bytes long, then {}", measure.bytes(), destination.bytes());
  return true;
}

}  // namespace

void save_checkpoint(const Checkpoint& checkpoint, std::ostream& out, ArchiveKind kind) {
  PayloadSink sink(nullptr, &out, /*checksum=*/false);
  bool written = false;
  try {
    written = write_checkpoint(
        checkpoint, kind,
        [&](const std::string& header) {
          return static_cast<bool>(out.write(header.data(), static_cast<std::streamsize>(header.size())));
        },
        sink);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("save_checkpoint: writing to the stream failed: {}", e.what());
  }
  if (!written || !out) fail("save_checkpoint: writing to the stream failed");
}

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path, ArchiveKind kind) {
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) fail("save: cannot open {} for writing: {}", temporary, std::strerror(errno));
  bool written = false;
  try {
    PayloadSink sink(file, nullptr, /*checksum=*/false);
    written = write_checkpoint(
                  checkpoint, kind,
                  [&](const std::string& header) { return std::fwrite(header.data(), 1, header.size(), file) == header.size(); },
                  sink) &&
              std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  } catch (const Error&) {
    std::fclose(file);
    std::remove(temporary.c_str());
    throw;
  } catch (const std::exception& e) {  // the archive's own errors
    std::fclose(file);
    std::remove(temporary.c_str());
    fail("save: writing {} failed: {}", temporary, e.what());
  }
  const int saved_errno = errno;
  if (std::fclose(file) != 0 || !written) {
    std::remove(temporary.c_str());
    fail("save: writing {} failed: {}", temporary, std::strerror(saved_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    fail("save: cannot rename {} to {}: {}", temporary, path, std::strerror(rename_errno));
  }
}

// ---- reading ----
namespace {

CheckpointHeader parse_header(std::string_view bytes, std::size_t& header_length, const std::string& source) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "TAPEGRAD") != 0)
    fail("{}: not a tapegrad checkpoint (the file does not start with TAPEGRAD)", source);
  const std::size_t newline = bytes.find('\n');
  if (newline == std::string::npos || newline > serialize_detail::kMaxHeaderBytes)
    fail("{}: truncated or corrupt checkpoint header", source);
  header_length = newline + 1;
  std::istringstream line(std::string(bytes.substr(8, newline - 8)));
  CheckpointHeader header;
  std::string kind, sizes, endian, crc_text;
  line >> header.format_version >> kind >> sizes >> endian >> header.payload_bytes >> crc_text;
  if (line.fail()) fail("{}: corrupt checkpoint header", source);
  if (header.format_version == 0) fail("{}: corrupt checkpoint header (format version 0)", source);
  if (header.format_version > kCheckpointFormatVersion)
    fail("{}: written by a newer tapegrad (file format version {}; this build reads up to {})", source,
         header.format_version, kCheckpointFormatVersion);
  if (kind == "binary")
    header.kind = ArchiveKind::Binary;
  else if (kind == "text")
    header.kind = ArchiveKind::Text;
  else
    fail("{}: unknown archive kind '{}'", source, kind);
  if (header.kind == ArchiveKind::Binary && (sizes != "f4d8i8" || endian != "le"))
    fail("{}: binary checkpoint from an incompatible architecture ({} {}); save it as text there", source, sizes, endian);
  char* end = nullptr;
  const unsigned long crc = std::strtoul(crc_text.c_str(), &end, 16);
  if (crc_text.size() != 8 || end != crc_text.c_str() + 8) fail("{}: corrupt checkpoint header (checksum field)", source);
  header.payload_crc32 = static_cast<std::uint32_t>(crc);
  // Note: the line must be exactly what this build would write for these values, so that no damaged
  // header (a changed letter case, extra white space) is accepted.
  const std::string canonical = fmt::format("TAPEGRAD {} {} {} {} {} {:08x}", header.format_version, kind, sizes, endian,
                                            header.payload_bytes, header.payload_crc32);
  if (bytes.compare(0, newline, canonical) != 0) fail("{}: corrupt checkpoint header", source);
  if (sizes != "f4d8i8" || endian != "le") fail("{}: corrupt checkpoint header (type sizes)", source);
  return header;
}

Checkpoint decode(std::string_view bytes, const std::string& source) {
  std::size_t header_length = 0;
  const CheckpointHeader header = parse_header(bytes, header_length, source);
  const std::size_t available = bytes.size() - header_length;
  const char* data = bytes.data() + header_length;
  const bool payload_intact =
      available == header.payload_bytes && serialize_detail::crc32_of(data, available) == header.payload_crc32;

  Checkpoint checkpoint;
  Payload payload;
  payload.target = &checkpoint;
  payload.verify_entries = !payload_intact;
  payload.budget = std::min<std::uint64_t>(available, header.payload_bytes);
  const std::string truncation =
      available < header.payload_bytes
          ? fmt::format(" (truncated: the header promises {} payload bytes, the file has {})", header.payload_bytes,
                        available)
          : std::string();
  try {
    boost::iostreams::stream<boost::iostreams::array_source> in(data, static_cast<std::size_t>(payload.budget));
    if (header.kind == ArchiveKind::Binary) {
      boost::archive::binary_iarchive ar(in, boost::archive::no_header);
      ar >> payload;
    } else {
      boost::archive::text_iarchive ar(in, boost::archive::no_header);
      ar >> payload;
    }
  } catch (const Error& e) {
    fail("{}: corrupt checkpoint at entry '{}': {}{}", source, payload.current, e.what(), truncation);
  } catch (const std::exception& e) {
    fail("{}: corrupt or truncated checkpoint at entry '{}': {}{}", source, payload.current, e.what(), truncation);
  }
  if (!truncation.empty()) fail("{}: checkpoint is incomplete{}", source, truncation);
  if (available > header.payload_bytes)
    fail("{}: {} unexpected bytes after the checkpoint payload", source, available - header.payload_bytes);
  if (!payload_intact) fail("{}: checkpoint is corrupt (payload checksum mismatch)", source);
  return checkpoint;
}

// Reads the rest of the stream: in one read when it can tell its size, else through a buffer.
std::string read_all(std::istream& in) {
  const std::istream::pos_type start = in.tellg();
  if (start != std::istream::pos_type(-1) && in.seekg(0, std::ios::end)) {
    const std::istream::pos_type end = in.tellg();
    in.seekg(start);
    if (end != std::istream::pos_type(-1) && end >= start && in) {
      std::string bytes(static_cast<std::size_t>(end - start), '\0');
      in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      bytes.resize(static_cast<std::size_t>(in.gcount()));
      return bytes;
    }
  }
  in.clear();
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Note: a file is mapped, not read: the kernel hands over its page-cache pages, with no copy into a fresh
// (page-faulted, zeroed) buffer; MAP_POPULATE reads it in one sequential sweep.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("load: cannot open {}: {}", path, std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      fail("load: cannot open {}: not a regular file", path);
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (address == MAP_FAILED) {
        const int map_errno = errno;
        ::close(fd);
        fail("load: cannot map {}: {}", path, std::strerror(map_errno));
      }
      data_ = static_cast<const char*>(address);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

Checkpoint load_checkpoint(std::istream& in, const std::string& source_name) {
  return decode(read_all(in), source_name);
}

Checkpoint load_checkpoint(const std::string& path) {
  const MappedFile file(path);
  return decode(file.bytes(), path);
}

CheckpointHeader read_checkpoint_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("load: cannot open {}: {}", path, std::strerror(errno));
  std::string head(serialize_detail::kMaxHeaderBytes + 1, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  std::size_t length = 0;
  return parse_header(head, length, path);
}

// ---- modules ----
void save(const nn::Module& module, const std::string& path, ArchiveKind kind) {
  Checkpoint checkpoint;
  checkpoint.set_model(module);
  save_checkpoint(checkpoint, path, kind);
}

void save(const nn::Module& module, std::ostream& out, ArchiveKind kind) {
  Checkpoint checkpoint;
  checkpoint.set_model(module);
  save_checkpoint(checkpoint, out, kind);
}

namespace {
nn::LoadResult load_into(nn::Module& module, const Checkpoint& checkpoint, bool strict, const std::string& source) {
  try {
    return module.load_state(checkpoint.model_state(), strict, checkpoint.model_versions);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}
}  // namespace

nn::LoadResult load(nn::Module& module, const std::string& path, bool strict) {
  if (auto result = foreign::load_if_foreign(module, path, strict)) return *result;  // a PyTorch zip or safetensors
  return load_into(module, load_checkpoint(path), strict, path);
}

nn::LoadResult load(nn::Module& module, std::istream& in, bool strict) {
  return load_into(module, load_checkpoint(in), strict, "<stream>");
}

}  // namespace tapegrad
