// The checkpoint file: one text header line, then a Boost.Serialization archive (binary or text).
// Note: every Boost archive include of the project lives in this file, so public headers stay light.
//
// Layout:  TAPEGRAD <format> <binary|text> f4d8i8 le <payload bytes> <payload crc32>\n<payload>
// Note: archives are written with boost::archive::no_header. Boost's own header starts with a length-prefixed
// signature string that its loader allocates blindly, and our first line already says what the file is.
// Robustness: the whole file is mapped (or a stream read) into memory and parsed from there. Every length read from the payload
// is checked against the bytes that are actually left before anything is allocated, so a corrupt length
// field cannot ask for a huge allocation; every tensor carries a CRC-32 of its bytes (so corruption names
// the entry), and the header carries one of the whole payload (so corruption anywhere is caught).
#include <tapegrad/framework/serialize/checkpoint.h>

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <locale>
#include <sstream>
#include <string_view>
#include <unistd.h>

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/archive/codecvt_null.hpp>
#include <boost/archive/text_iarchive.hpp>
#include <boost/archive/text_oarchive.hpp>
#include <boost/serialization/binary_object.hpp>
#include <boost/serialization/split_member.hpp>
#include <boost/serialization/version.hpp>
#include <boost/math/special_functions/nonfinite_num_facets.hpp>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/serialize/detail/checkpoint_format.h>
#include <tapegrad/framework/serialize/detail/payload_sink.h>

static_assert(std::endian::native == std::endian::little, "checkpoint CRCs assume a little-endian host");

namespace tapegrad {

namespace serialize_detail {

constexpr std::uint64_t kMaxNameBytes = 4096;
constexpr std::uint64_t kMaxDims = 16;

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
  PayloadSink* sink = nullptr;  // when saving

  template <class Archive>
  void save(Archive& ar, unsigned /*version*/) const {
    const Checkpoint& c = *source;
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
      std::uint32_t entry_checksum = 0;  // a measuring pass writes 0: same size, and it never reads the data
      if constexpr (is_binary<Archive>) {
        // the checksum of the data as the sink copied it out, not of the live tensor, which may have moved on
        if (sink->checksums()) sink->begin_data();
        if (bytes > 0) ar << boost::serialization::make_binary_object(const_cast<void*>(t.raw_data()), bytes);
        if (sink->checksums()) entry_checksum = entry_crc(entry, sink->end_data());
      } else {
        entry_checksum = entry_crc(entry);  // text saves always work on a snapshot (see write_checkpoint)
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

// ---- writing ----
namespace {

// Note: text archives write NaN and infinity as "nan" and "inf" and read them back (Boost.Math's non-finite
// facets). Without them a diverged model saved as text was reported saved and then could not be loaded.
const std::locale& text_locale() {
  static const std::locale locale(
      std::locale(std::locale(std::locale::classic(), new boost::archive::codecvt_null<char>),
                  new boost::math::nonfinite_num_put<char>),
      new boost::math::nonfinite_num_get<char>);
  return locale;
}

void encode_payload(const Checkpoint& checkpoint, ArchiveKind kind, PayloadSink& sink) {
  Payload payload;
  payload.source = &checkpoint;
  payload.sink = &sink;
  if (kind == ArchiveKind::Binary) {
    boost::archive::binary_oarchive ar(sink, boost::archive::no_header);
    ar << static_cast<const Payload&>(payload);
  } else {
    std::ostream out(&sink);
    out.imbue(text_locale());
    boost::archive::text_oarchive ar(out, boost::archive::no_header | boost::archive::no_codecvt);
    ar << static_cast<const Payload&>(payload);
  }
}

std::string header_line(ArchiveKind kind, std::uint64_t payload_bytes, std::uint32_t payload_crc) {
  return fmt::format("TAPEGRAD {} {} f4d8i8 le {} {:08x}\n", kCheckpointFormatVersion,
                     kind == ArchiveKind::Binary ? "binary" : "text", payload_bytes, payload_crc);
}

// A copy whose tensors no other thread can change, for the saves that must read the data twice.
Checkpoint snapshot(const Checkpoint& checkpoint) {
  NoGradGuard no_grad;
  Checkpoint copy = checkpoint;
  for (auto* entries : {&copy.model, &copy.optimizer, &copy.scheduler})
    for (CheckpointEntry& entry : *entries) entry.value = entry.value.detach().clone();
  return copy;
}

// Measures (size and checksum), writes the header line, then the payload: for data that cannot change.
template <class WriteHeader>
bool write_in_two_passes(const Checkpoint& stable, ArchiveKind kind, WriteHeader&& write_header,
                         PayloadSink& destination) {
  PayloadSink measure(PayloadSink::Mode::Checksum);
  encode_payload(stable, kind, measure);
  measure.finish();
  if (!write_header(header_line(kind, measure.bytes(), measure.crc()))) return false;
  encode_payload(stable, kind, destination);
  if (!destination.finish()) return false;
  if (destination.bytes() != measure.bytes() || destination.crc() != measure.crc())
    fail("save_checkpoint: the payload came out {} bytes long, then {}", measure.bytes(), destination.bytes());
  return true;
}

}  // namespace

namespace serialize_detail {

void check_savable(const Checkpoint& checkpoint, const char* op) {
  for (const auto* entries : {&checkpoint.model, &checkpoint.optimizer, &checkpoint.scheduler})
    for (const CheckpointEntry& entry : *entries)
      if (!entry.value.defined()) fail("{}: entry '{}' is an undefined tensor; there is nothing to save", op, entry.name);
}

bool write_checkpoint_file(const Checkpoint& checkpoint, ArchiveKind kind, std::FILE* file) try {
  const auto write_header = [&](const std::string& header) {
    return std::fwrite(header.data(), 1, header.size(), file) == header.size();
  };
  if (kind == ArchiveKind::Text) {  // a text payload's size depends on the values: measure a snapshot
    const Checkpoint stable = snapshot(checkpoint);
    PayloadSink sink(PayloadSink::Mode::Checksum, file);
    return write_in_two_passes(stable, kind, write_header, sink);
  }
  // Note: a binary payload's size depends only on names and shapes, so a measuring pass that never reads the
  // data gives it. The data is then read once, as it is written, and the header's checksum is filled in last.
  PayloadSink measure(PayloadSink::Mode::Count);
  encode_payload(checkpoint, kind, measure);
  if (!write_header(header_line(kind, measure.bytes(), 0))) return false;
  PayloadSink sink(PayloadSink::Mode::Checksum, file);
  encode_payload(checkpoint, kind, sink);
  if (!sink.finish()) return false;
  if (sink.bytes() != measure.bytes())
    fail("save: the payload came out {} bytes long, then {} (an entry changed shape during the save)", measure.bytes(),
         sink.bytes());
  const std::string header = header_line(kind, sink.bytes(), sink.crc());
  return std::fflush(file) == 0 &&
         ::pwrite(::fileno(file), header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
} catch (const boost::archive::archive_exception&) {
  return false;  // the sink's write failed (errno says why: a full disk, say); Boost's wording would not help
}

}  // namespace serialize_detail

void save_checkpoint(const Checkpoint& checkpoint, std::ostream& out, ArchiveKind kind) {
  serialize_detail::check_savable(checkpoint, "save_checkpoint");
  PayloadSink sink(PayloadSink::Mode::Checksum, nullptr, &out);
  bool written = false;
  try {
    // Note: a stream cannot be rewritten at its start, so its payload is measured first, on a snapshot.
    written = write_in_two_passes(
        snapshot(checkpoint), kind,
        [&](const std::string& header) {
          return static_cast<bool>(out.write(header.data(), static_cast<std::streamsize>(header.size())));
        },
        sink);
  } catch (const Error&) {
    throw;
  } catch (const boost::archive::archive_exception&) {  // the stream refused a write
  } catch (const std::exception& e) {
    fail("save_checkpoint: writing to the stream failed: {}", e.what());
  }
  if (!written || !out) fail("save_checkpoint: writing to the stream failed");
}

// ---- reading ----
namespace {

// The payload's bytes as a stream buffer, without a copy.
class MemoryBuffer : public std::streambuf {
 public:
  MemoryBuffer(const char* data, std::size_t size) {
    char* begin = const_cast<char*>(data);  // only ever read: a get area needs non-const pointers
    setg(begin, begin, begin + size);
  }
};

// What a Boost archive exception means for a tapegrad file, in words a user can act on.
std::string archive_problem(const boost::archive::archive_exception& e) {
  switch (e.code) {
    case boost::archive::archive_exception::input_stream_error:
      return "the data ends early or holds an unreadable value";
    case boost::archive::archive_exception::unsupported_version:
    case boost::archive::archive_exception::unsupported_class_version:
      return "an unknown payload layout version";
    default:
      return "unreadable archive data";
  }
}

}  // namespace

namespace serialize_detail {

CheckpointHeader parse_header(std::string_view bytes, std::size_t& header_length, const std::string& source) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "TAPEGRAD") != 0)
    fail("{}: not a tapegrad checkpoint (the file does not start with TAPEGRAD)", source);
  const std::size_t newline = bytes.find('\n');
  if (newline == std::string::npos || newline > kMaxHeaderBytes)
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
    fail("{}: corrupt checkpoint header (unknown archive kind '{}')", source, kind);
  // Note: float, double and int64 are 4, 8 and 8 bytes on every platform tapegrad builds on, so the only
  // genuine other architecture a file can come from is a big-endian one; any other value is damage.
  if (sizes != "f4d8i8" || (endian != "le" && endian != "be"))
    fail("{}: corrupt checkpoint header (type sizes '{} {}')", source, sizes, endian);
  if (header.kind == ArchiveKind::Binary && endian != "le")
    fail("{}: binary checkpoint from a big-endian architecture; save it as text there", source);
  char* end = nullptr;
  const unsigned long crc = std::strtoul(crc_text.c_str(), &end, 16);
  if (crc_text.size() != 8 || end != crc_text.c_str() + 8) fail("{}: corrupt checkpoint header (checksum field)", source);
  header.payload_crc32 = static_cast<std::uint32_t>(crc);
  // Note: the line must be exactly what this build would write for these values, so that no damaged
  // header (a changed letter case, extra white space) is accepted.
  const std::string canonical = fmt::format("TAPEGRAD {} {} {} {} {} {:08x}", header.format_version, kind, sizes, endian,
                                            header.payload_bytes, header.payload_crc32);
  if (bytes.compare(0, newline, canonical) != 0 || endian != "le") fail("{}: corrupt checkpoint header", source);
  return header;
}

Checkpoint decode(std::string_view bytes, const std::string& source) {
  std::size_t header_length = 0;
  const CheckpointHeader header = parse_header(bytes, header_length, source);
  const std::size_t available = bytes.size() - header_length;
  const char* data = bytes.data() + header_length;
  const bool payload_intact =
      available == header.payload_bytes && crc32_of(data, available) == header.payload_crc32;

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
    MemoryBuffer buffer(data, static_cast<std::size_t>(payload.budget));
    std::istream in(&buffer);
    if (header.kind == ArchiveKind::Binary) {
      boost::archive::binary_iarchive ar(in, boost::archive::no_header);
      ar >> payload;
    } else {
      in.imbue(text_locale());
      boost::archive::text_iarchive ar(in, boost::archive::no_header | boost::archive::no_codecvt);
      ar >> payload;
    }
  } catch (const Error& e) {
    fail("{}: corrupt checkpoint at entry '{}': {}{}", source, payload.current, e.what(), truncation);
  } catch (const boost::archive::archive_exception& e) {
    fail("{}: corrupt or truncated checkpoint at entry '{}': {}{}", source, payload.current, archive_problem(e),
         truncation);
  } catch (const std::bad_alloc&) {
    fail("{}: checkpoint entry '{}' does not fit in memory", source, payload.current);
  }
  if (!truncation.empty()) fail("{}: checkpoint is incomplete{}", source, truncation);
  if (available > header.payload_bytes)
    fail("{}: {} unexpected bytes after the checkpoint payload", source, available - header.payload_bytes);
  if (!payload_intact) fail("{}: checkpoint is corrupt (payload checksum mismatch)", source);
  return checkpoint;
}

}  // namespace serialize_detail

namespace {

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

}  // namespace

Checkpoint load_checkpoint(std::istream& in, const std::string& source_name) {
  return serialize_detail::decode(read_all(in), source_name);
}

}  // namespace tapegrad
