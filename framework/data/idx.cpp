#include "framework/data/idx.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

namespace tapegrad::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // type 0x08 (unsigned byte), 3 dims
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // type 0x08 (unsigned byte), 1 dim
// Note: a sanity bound on any one extent, so a corrupt header cannot ask for terabytes.
constexpr std::uint64_t kMaxExtent = std::uint64_t{1} << 31;

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

/// The whole decompressed content of `path`, gzip or plain.
std::vector<std::uint8_t> read_all_bytes(const char* op, const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) fail("{}: {} is a directory, not an IDX file", op, path);
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("{}: cannot open {}: {}{}", op, path, std::strerror(errno), missing_file_hint(path));
  unsigned char head[2] = {0, 0};
  file.read(reinterpret_cast<char*>(head), 2);
  const bool gzipped = file.gcount() == 2 && head[0] == 0x1f && head[1] == 0x8b;
  file.clear();
  file.seekg(0);
  std::vector<std::uint8_t> bytes;
  if (!gzipped) {
    file.seekg(0, std::ios::end);
    bytes.resize(static_cast<std::size_t>(file.tellg()));
    file.seekg(0);
    file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!file) fail("{}: {}: read error", op, path);
    return bytes;
  }
  // Note: Boost reports a damaged or cut-off gzip stream by throwing gzip_error (or a plain ios failure);
  // both become a tapegrad::Error naming the file.
  try {
    namespace io = boost::iostreams;
    io::filtering_istream in;
    in.push(io::gzip_decompressor());
    in.push(file);
    constexpr std::size_t kChunk = 1 << 20;
    std::size_t used = 0;
    while (in) {
      bytes.resize(used + kChunk);
      in.read(reinterpret_cast<char*>(bytes.data() + used), kChunk);
      used += static_cast<std::size_t>(in.gcount());
    }
    if (in.bad()) fail("the compressed stream ends early or is corrupt");
    bytes.resize(used);
  } catch (const std::exception& e) {
    fail("{}: {}: damaged or truncated gzip data ({})", op, path, e.what());
  }
  return bytes;
}

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

/// Parses the header of an unsigned-byte IDX file with `rank` dims; returns the dims and checks the payload size.
Shape parse_header(const char* op, const std::string& path, const std::vector<std::uint8_t>& bytes,
                   std::uint32_t magic, std::size_t rank, const char* what) {
  const std::size_t header = 4 + 4 * rank;
  if (bytes.size() < 4) fail("{}: {}: truncated: {} bytes, too short for an IDX header", op, path, bytes.size());
  const std::uint32_t found = big_endian_u32(bytes.data());
  if (found != magic)
    fail("{}: {}: wrong magic number 0x{:08x} (expected 0x{:08x}: {})", op, path, found, magic, what);
  if (bytes.size() < header)
    fail("{}: {}: truncated: {} bytes, the header needs {}", op, path, bytes.size(), header);
  Shape dims;
  std::uint64_t payload = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t extent = big_endian_u32(bytes.data() + 4 + 4 * d);
    if (extent > kMaxExtent) fail("{}: {}: implausible extent {} in dim {}", op, path, extent, d);
    if (d > 0 && extent == 0) fail("{}: {}: dim {} has extent 0", op, path, d);
    dims.push_back(static_cast<std::int64_t>(extent));
    payload *= extent;
  }
  const std::uint64_t have = bytes.size() - header;
  if (have < payload)
    fail("{}: {}: truncated: header {} promises {} data bytes, the file has {}", op, path, shape_string(dims),
         payload, have);
  if (have > payload)
    fail("{}: {}: {} unexpected bytes after the {} data bytes of header {}", op, path, have - payload, payload,
         shape_string(dims));
  return dims;
}

}  // namespace

std::string fashion_mnist_dir(const std::string& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* env = std::getenv(kFashionMnistDirEnv); env != nullptr && *env != '\0') return env;
  return kDefaultFashionMnistDir;
}

Tensor read_idx_images(const std::string& path, bool scale_to_unit) {
  const char* op = "read_idx_images";
  const std::vector<std::uint8_t> bytes = read_all_bytes(op, path);
  const Shape dims = parse_header(op, path, bytes, kImagesMagic, 3, "an IDX image file of unsigned bytes, 3 dims");
  Tensor images = empty({dims[0], 1, dims[1], dims[2]}, DType::Float32);
  const std::uint8_t* source = bytes.data() + 16;
  float* target = images.data<float>();
  const std::int64_t n = images.numel();
  // Note: a division, not a multiplication by 1/255, so values match torchvision's ToTensor bit for bit.
  if (scale_to_unit) {
    for (std::int64_t i = 0; i < n; ++i) target[i] = static_cast<float>(source[i]) / 255.0f;
  } else {
    for (std::int64_t i = 0; i < n; ++i) target[i] = static_cast<float>(source[i]);
  }
  return images;
}

Tensor read_idx_labels(const std::string& path) {
  const char* op = "read_idx_labels";
  const std::vector<std::uint8_t> bytes = read_all_bytes(op, path);
  const Shape dims = parse_header(op, path, bytes, kLabelsMagic, 1, "an IDX label file of unsigned bytes, 1 dim");
  Tensor labels = empty({dims[0]}, DType::Int64);
  const std::uint8_t* source = bytes.data() + 8;
  std::int64_t* target = labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < dims[0]; ++i) target[i] = source[i];
  return labels;
}

}  // namespace tapegrad::data
