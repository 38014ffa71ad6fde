// The zip container of torch.save files through libzip, with every size in the directory checked before it is
// trusted and libzip's error codes translated into what they mean for a PyTorch file.
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <new>

#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/serialize/detail/zip_archive.h>

namespace tapegrad::foreign {
namespace {

// Note: deflate cannot expand data by more than about 1032:1, so an entry that claims a larger uncompressed size
// than that is refused before anything is allocated for it. torch.save itself stores entries uncompressed.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::size_t kChunk = std::size_t{1} << 20;

using ZipFile = std::unique_ptr<zip_file_t, int (*)(zip_file_t*)>;

}  // namespace

std::string zip_error_meaning(int code) {
  switch (code) {
    case ZIP_ER_NOZIP: return "no zip directory was found at its end (a truncated file, or not a zip archive)";
    case ZIP_ER_INCONS:
      return "its zip directory contradicts itself or the entries' local headers (a damaged or crafted archive)";
    case ZIP_ER_EXISTS: return "two entries of its zip directory have the same name";
    case ZIP_ER_NOENT:
      return "an entry's size or offset is 0xFFFFFFFF, which promises a ZIP64 record that is missing or damaged";
    case ZIP_ER_MULTIDISK: return "it is part of a multi-disk zip archive, which torch.save never writes";
    case ZIP_ER_SEEK:
    case ZIP_ER_READ:
    case ZIP_ER_EOF: return "an entry or the zip directory reaches past the end of the file (truncated?)";
    case ZIP_ER_CRC: return "an entry's data does not match its CRC-32 (corrupted)";
    case ZIP_ER_ZLIB:
    case ZIP_ER_COMPRESSED_DATA: return "an entry's deflated data is corrupt";
    case ZIP_ER_COMPNOTSUPP: return "an entry uses a compression method other than stored or deflated";
    case ZIP_ER_ENCRNOTSUPP:
    case ZIP_ER_NOPASSWD:
    case ZIP_ER_WRONGPASSWD: return "an entry is encrypted, which torch.save never does";
    case ZIP_ER_MEMORY: return "out of memory while reading the zip directory";
    default: return "the zip container is unreadable";
  }
}

namespace {
// "<meaning> (libzip error N)": libzip's own words ("No such file" for a missing ZIP64 record, "File already
// exists" for a duplicate name) mislead about a file that exists, so only its code goes with the meaning.
std::string explain(int code) { return fmt::format("{} (libzip error {})", zip_error_meaning(code), code); }
}  // namespace

ZipArchive::ZipArchive(std::string_view bytes, const std::string& source) : source_(source), file_size_(bytes.size()) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* from = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  const int code = zip_error_code_zip(&error);
  zip_error_fini(&error);
  open(from, code);
}

ZipArchive::ZipArchive(int fd, std::uint64_t file_size, const std::string& source)
    : source_(source), file_size_(file_size) {
  const int copy = ::dup(fd);
  std::FILE* file = copy >= 0 ? ::fdopen(copy, "rb") : nullptr;
  if (file == nullptr) {
    if (copy >= 0) ::close(copy);
    fail("{}: cannot read the file as a zip archive (dup/fdopen failed)", source);
  }
  zip_error_t error;
  zip_error_init(&error);
  // Note: the source owns `file` from here on, and closes it with the archive.
  zip_source_t* from = zip_source_filep_create(file, 0, static_cast<zip_int64_t>(file_size), &error);
  if (from == nullptr) std::fclose(file);
  const int code = zip_error_code_zip(&error);
  zip_error_fini(&error);
  open(from, code);
}

void ZipArchive::open(zip_source_t* from, int error_code_if_null) {
  if (from == nullptr)
    fail("{}: not a readable PyTorch file: {}", source_, explain(error_code_if_null));
  zip_error_t error;
  zip_error_init(&error);
  archive_ = zip_open_from_source(from, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (archive_ == nullptr) {
    zip_source_free(from);
    const std::string reason = explain(zip_error_code_zip(&error));
    zip_error_fini(&error);
    fail("{}: not a tapegrad checkpoint, and not a readable PyTorch file (it starts like a zip archive, but {})",
         source_, reason);
  }
  zip_error_fini(&error);
}

ZipArchive::~ZipArchive() {
  if (archive_ != nullptr) zip_discard(archive_);
}

std::vector<std::string> ZipArchive::names() const {
  std::vector<std::string> out;
  const zip_int64_t n = zip_get_num_entries(archive_, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(archive_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    out.emplace_back(name != nullptr ? name : "");
  }
  return out;
}

bool ZipArchive::contains(const std::string& name) const {
  return zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW) >= 0;
}

ZipEntry ZipArchive::entry(const std::string& name) const {
  const std::string shown = detail::printable(name);
  const zip_int64_t index = zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW);
  if (index < 0) fail("{}: the archive has no entry '{}'", source_, shown);
  zip_stat_t stat;
  zip_stat_init(&stat);
  constexpr zip_uint64_t kNeeded = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if (zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) != 0 || (stat.valid & kNeeded) != kNeeded) {
    zip_error_t* error = zip_get_error(archive_);
    fail("{}: cannot read the directory record of entry '{}': {}", source_, shown,
         explain(zip_error_code_zip(error)));
  }
  if (stat.comp_size > file_size_)
    fail("{}: entry '{}' claims {} compressed bytes in a {}-byte file", source_, shown, stat.comp_size, file_size_);
  const bool stored = stat.comp_method == ZIP_CM_STORE;
  if (!stored && stat.comp_method != ZIP_CM_DEFLATE)
    fail("{}: entry '{}' uses compression method {} (only stored and deflated entries are read)", source_, shown,
         stat.comp_method);
  if ((stored && stat.size != stat.comp_size) || (!stored && stat.size / kMaxDeflateRatio > stat.comp_size))
    fail("{}: entry '{}' claims {} bytes from {} {} bytes{}", source_, shown, stat.size, stat.comp_size,
         stored ? "stored" : "deflated", stored ? "" : " (deflate expands at most 1032:1)");
  return ZipEntry{name, static_cast<std::uint64_t>(index), stat.size, !stored};
}

void ZipArchive::read_prefix(const ZipEntry& entry, std::uint64_t bytes,
                             const std::function<void(const char*, std::size_t)>& sink) const {
  read(entry, bytes, nullptr, &sink);
}

void ZipArchive::read_prefix_into(const ZipEntry& entry, std::uint64_t bytes, char* into) const {
  read(entry, bytes, into, nullptr);
}

void ZipArchive::read(const ZipEntry& entry, std::uint64_t bytes, char* into,
                      const std::function<void(const char*, std::size_t)>* sink) const {
  const std::string shown = detail::printable(entry.name);
  if (bytes > entry.size)
    fail("{}: entry '{}' holds {} bytes, fewer than the {} needed", source_, shown, entry.size, bytes);
  ZipFile file(zip_fopen_index(archive_, entry.index, 0), zip_fclose);
  if (!file) {
    zip_error_t* error = zip_get_error(archive_);
    fail("{}: cannot open entry '{}': {}", source_, shown, explain(zip_error_code_zip(error)));
  }
  std::vector<char> chunk(into != nullptr ? 0 : static_cast<std::size_t>(std::min(std::max<std::uint64_t>(bytes, 1), std::uint64_t{kChunk})));
  std::uint64_t done = 0;
  const bool whole = bytes == entry.size;
  while (true) {
    // Note: when the whole entry is wanted, one read past its end, so that libzip's CRC check runs.
    char spare = 0;
    char* target = &spare;
    std::uint64_t want = whole ? 1 : 0;
    if (done < bytes) {
      target = into != nullptr ? into + done : chunk.data();
      want = into != nullptr ? bytes - done : std::min<std::uint64_t>(bytes - done, chunk.size());
    }
    if (want == 0) break;
    const zip_int64_t n = zip_fread(file.get(), target, want);
    if (n < 0) {
      zip_error_t* error = zip_file_get_error(file.get());
      fail("{}: entry '{}' is corrupt: {}", source_, shown, explain(zip_error_code_zip(error)));
    }
    if (n == 0) break;
    if (done >= bytes) fail("{}: entry '{}' holds more than the {} bytes it claims", source_, shown, entry.size);
    if (sink != nullptr) (*sink)(target, static_cast<std::size_t>(n));
    done += static_cast<std::uint64_t>(n);
  }
  if (done != bytes) fail("{}: entry '{}' holds {} bytes, not the {} it claims", source_, shown, done, entry.size);
}

void ZipArchive::prove_prefix(const ZipEntry& entry, std::uint64_t bytes) const {
  if (entry.deflated && bytes > kChunk) read_prefix(entry, bytes, [](const char*, std::size_t) {});
}

std::string ZipArchive::read_small(const ZipEntry& entry, std::uint64_t max_bytes, const char* what) const {
  if (entry.size > max_bytes)
    fail("{}: {} '{}' claims {} bytes (at most {} are read)", source_, what, detail::printable(entry.name), entry.size,
         max_bytes);
  std::string out;
  out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(entry.size, kChunk)));
  // Note: the buffer grows only with what is actually inflated, so a false claim costs only what the entry holds.
  read_prefix(entry, entry.size, [&](const char* data, std::size_t size) { out.append(data, size); });
  return out;
}

}  // namespace tapegrad::foreign
