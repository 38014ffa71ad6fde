// The checkpoint payload: a Boost.Serialization archive (binary or text) of a Checkpoint, written and read.
// Note: every Boost archive include of the project lives in this file, so public headers stay light and only
// one file pays Boost's compile time; checkpoint.cpp (the header line, the write and read flow) uses only the
// two functions at the bottom.
//
// Note: archives are written with boost::archive::no_header. Boost's own header starts with a length-prefixed
// signature string that its loader allocates blindly, and our first line already says what the file is.
// Robustness: every length read from the payload is checked against the bytes that are actually left before
// anything is allocated, so a corrupt length field cannot ask for a huge allocation; every tensor carries a
// CRC-32 of its bytes, so corruption names the entry.
#include <zlib.h>

#include <bit>
#include <locale>
#include <string>

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
        detail::dispatch_moves(t.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* p = t.data<T>();
          // float32 goes through double: every float is exactly a double, and 17 digits round-trip it; a bfloat16
          // is written as its 16 bits, so NaN payloads and -0 survive too
          if constexpr (std::is_same_v<T, BFloat16>) {
            for (std::int64_t i = 0; i < t.numel(); ++i) ar << p[i].bits;
          } else {
            using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;
            for (std::int64_t i = 0; i < t.numel(); ++i) ar << static_cast<Wide>(p[i]);
          }
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
      if (dtype > static_cast<std::uint64_t>(DType::BFloat16)) fail("corrupt dtype code {}", dtype);
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
        detail::dispatch_moves(type, [&](auto tag) {
          using T = decltype(tag);
          T* p = entry.value.data<T>();
          for (std::uint64_t k = 0; k < elements; ++k) {
            if constexpr (std::is_same_v<T, BFloat16>) {
              ar >> p[k].bits;
            } else {
              using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;
              Wide v{};
              ar >> v;
              p[k] = static_cast<T>(v);
            }
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

namespace tapegrad::serialize_detail {

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

bool encode_payload(const Checkpoint& checkpoint, ArchiveKind kind, PayloadSink& sink) try {
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
  return true;
} catch (const boost::archive::archive_exception&) {
  return false;  // the sink's write failed (errno says why: a full disk, say); Boost's wording would not help
}

Checkpoint decode_payload(const char* data, std::uint64_t size, ArchiveKind kind, bool verify_entries,
                          const std::string& source, const std::string& truncation) {
  Checkpoint checkpoint;
  Payload payload;
  payload.target = &checkpoint;
  payload.verify_entries = verify_entries;
  payload.budget = size;
  try {
    MemoryBuffer buffer(data, static_cast<std::size_t>(payload.budget));
    std::istream in(&buffer);
    if (kind == ArchiveKind::Binary) {
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
  return checkpoint;
}

}  // namespace tapegrad::serialize_detail
