#include <tapegrad/framework/data/idx.h>

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>
#include <unistd.h>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/file_io.h>

namespace tapegrad::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // type 0x08 (unsigned byte), 3 dims
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // type 0x08 (unsigned byte), 1 dim
// Note: a sanity bound on any one extent, so a corrupt header cannot ask for terabytes.
constexpr std::uint64_t kMaxExtent = std::uint64_t{1} << 31;
// Deflate's best case is 1032:1 (258-byte matches, about 2 bits each); no gzip file inflates to more than its
// size times this (plus a little for headers), so a larger promise is refused before anything is allocated.
constexpr std::uint64_t kMaxGzipRatio = 1032;
constexpr std::size_t kChunk = std::size_t{1} << 20;

/// The hint appended when a file cannot be opened.
std::string missing_file_hint(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ignored;
  if (fs::equivalent(parent, kDefaultFashionMnistDir, ignored) || parent == fs::path(kDefaultFashionMnistDir))
    return fmt::format("; install Debian's Fashion-MNIST files with `apt-get install dataset-fashion-mnist`, "
                       "or point {} at a directory holding them", kFashionMnistDirEnv);
  return "";
}

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

/// An IDX file's bytes, decompressed on the fly when it is gzip (recognised by its content, not its name).
/// Note: zlib reads a plain file through unchanged ("transparent" mode), so both kinds take one path, and
/// nothing is ever inflated beyond what the caller asks for: a gzip bomb costs only the bytes requested.
class IdxStream {
 public:
  IdxStream(const char* op, const std::string& path) : file_(path, op, missing_file_hint(path)), op_(op), path_(path) {
    const int fd = ::dup(file_.fd());
    if (fd < 0 || (gz_ = ::gzdopen(fd, "rb")) == nullptr) {
      if (fd >= 0) ::close(fd);
      fail("{}: {}: cannot start reading: out of memory", op, path);
    }
  }
  ~IdxStream() { ::gzclose_r(gz_); }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  /// Reads up to `count` bytes (fewer only at the end of the data); a damaged or cut-off gzip stream throws.
  std::size_t read(std::uint8_t* data, std::size_t count) {
    std::size_t done = 0;
    while (done < count) {
      const auto want = static_cast<unsigned>(std::min(count - done, kChunk));
      const int got = ::gzread(gz_, data + done, want);
      int code = Z_OK;
      const char* reason = ::gzerror(gz_, &code);
      if (code == Z_BUF_ERROR) fail("{}: {}: truncated gzip stream ({})", op_, path_, reason);
      if (got < 0 || code != Z_OK) fail("{}: {}: damaged gzip data ({})", op_, path_, reason);
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  /// Whether the file is plain (only known after the first read).
  bool plain() const { return ::gzdirect(gz_) == 1; }
  std::uint64_t file_size() const { return file_.size(); }

 private:
  detail::RegularFile file_;
  const char* op_;
  const std::string& path_;
  gzFile gz_ = nullptr;
};

/// Reads and checks the header of an unsigned-byte IDX file with `rank` dims, then checks that the file can hold
/// the payload it promises, before anything is allocated. Returns the dims and the payload size in bytes.
Shape read_header(IdxStream& in, const char* op, const std::string& path, std::uint32_t magic, std::size_t rank,
                  const char* what, std::uint64_t& payload) {
  const std::size_t header = 4 + 4 * rank;
  std::uint8_t bytes[16] = {};
  const std::size_t got = in.read(bytes, header);
  if (got < 4) fail("{}: {}: truncated: {} bytes, too short for an IDX header", op, path, got);
  const std::uint32_t found = big_endian_u32(bytes);
  if (found != magic)
    fail("{}: {}: wrong magic number 0x{:08x} (expected 0x{:08x}: {})", op, path, found, magic, what);
  if (got < header) fail("{}: {}: truncated: {} bytes, the header needs {}", op, path, got, header);
  Shape dims;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t extent = big_endian_u32(bytes + 4 + 4 * d);
    if (extent > kMaxExtent) fail("{}: {}: implausible extent {} in dim {}", op, path, extent, d);
    if (d > 0 && extent == 0) fail("{}: {}: dim {} has extent 0", op, path, d);
    dims.push_back(static_cast<std::int64_t>(extent));
  }
  const std::string context = fmt::format("{}: {}", op, path);
  payload = static_cast<std::uint64_t>(checked_numel(dims, context.c_str()));
  if (in.plain()) {
    const std::uint64_t have = in.file_size() - header;
    if (have < payload)
      fail("{}: {}: truncated: header {} promises {} data bytes, the file has {}", op, path, shape_string(dims),
           payload, have);
    if (have > payload)
      fail("{}: {}: {} unexpected bytes after the {} data bytes of header {}", op, path, have - payload, payload,
           shape_string(dims));
  } else if (payload / kMaxGzipRatio > in.file_size()) {
    fail("{}: {}: header {} promises {} data bytes, more than a gzip file of {} bytes can hold", op, path,
         shape_string(dims), payload, in.file_size());
  }
  return dims;
}

/// Streams the payload through `convert(source, count, offset)` in chunks, then checks that nothing follows it.
template <class Convert>
void read_payload(IdxStream& in, const char* op, const std::string& path, const Shape& dims, std::uint64_t payload,
                  Convert convert) {
  std::vector<std::uint8_t> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(payload + 1, kChunk)));
  std::uint64_t done = 0;
  while (done < payload) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(payload - done, chunk.size()));
    const std::size_t got = in.read(chunk.data(), want);
    convert(chunk.data(), got, done);
    done += got;
    if (got < want)
      fail("{}: {}: truncated: header {} promises {} data bytes, the file has {}", op, path, shape_string(dims),
           payload, done);
  }
  // One byte more: detects trailing data, and lets zlib verify the gzip trailer (length and CRC).
  std::uint8_t extra = 0;
  if (in.read(&extra, 1) != 0)
    fail("{}: {}: unexpected bytes after the {} data bytes of header {}", op, path, payload, shape_string(dims));
}

}  // namespace

std::string fashion_mnist_dir(const std::string& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* env = std::getenv(kFashionMnistDirEnv); env != nullptr && *env != '\0') return env;
  return kDefaultFashionMnistDir;
}

Tensor read_idx_images(const std::string& path, bool scale_to_unit) {
  const char* op = "read_idx_images";
  IdxStream in(op, path);
  std::uint64_t payload = 0;
  const Shape dims = read_header(in, op, path, kImagesMagic, 3, "an IDX image file of unsigned bytes, 3 dims", payload);
  Tensor images = empty({dims[0], 1, dims[1], dims[2]}, DType::Float32);
  float* target = images.data<float>();
  // Note: a division, not a multiplication by 1/255, so values match torchvision's ToTensor bit for bit.
  read_payload(in, op, path, dims, payload, [&](const std::uint8_t* source, std::size_t count, std::uint64_t offset) {
    float* out = target + offset;
    if (scale_to_unit) {
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(source[i]) / 255.0f;
    } else {
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(source[i]);
    }
  });
  return images;
}

Tensor read_idx_labels(const std::string& path) {
  const char* op = "read_idx_labels";
  IdxStream in(op, path);
  std::uint64_t payload = 0;
  const Shape dims = read_header(in, op, path, kLabelsMagic, 1, "an IDX label file of unsigned bytes, 1 dim", payload);
  Tensor labels = empty({dims[0]}, DType::Int64);
  std::int64_t* target = labels.data<std::int64_t>();
  read_payload(in, op, path, dims, payload, [&](const std::uint8_t* source, std::size_t count, std::uint64_t offset) {
    for (std::size_t i = 0; i < count; ++i) target[offset + i] = source[i];
  });
  return labels;
}

}  // namespace tapegrad::data
