#pragma once
// Internal: the zip container of torch.save files, read through libzip with every size checked before it is
// trusted (framework/serialize/zip_archive.cpp).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

struct zip;
struct zip_source;

namespace tapegrad::foreign {

/// One entry's directory record, checked: compressed size within the file, a stored entry's size equal to its
/// compressed size, a deflated entry's size within deflate's largest expansion (1032:1) of its compressed size.
struct ZipEntry {
  std::string name;
  std::uint64_t index = 0;
  std::uint64_t size = 0;  // uncompressed bytes
  bool deflated = false;
};

/// A read-only zip archive from a file or from bytes in memory. Every error is a tapegrad::Error naming `source`,
/// the entry, and what libzip's code means for a PyTorch file (with the code, not libzip's own words).
class ZipArchive {
 public:
  /// The archive in `bytes`, which must outlive it.
  ZipArchive(std::string_view bytes, const std::string& source);
  /// The archive in the file open on `fd` (a regular file of `file_size` bytes); the descriptor is duplicated.
  ZipArchive(int fd, std::uint64_t file_size, const std::string& source);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// The checked directory record of `name`; throws when there is no such entry.
  ZipEntry entry(const std::string& name) const;

  /// The whole entry, which must hold at most `max_bytes`: the buffer grows with what is actually inflated, so
  /// an entry that claims more than it holds costs only what it holds.
  std::string read_small(const ZipEntry& entry, std::uint64_t max_bytes, const char* what) const;
  /// The first `bytes` of the entry, in pieces of at most 1 MiB handed to `sink` in order. When `bytes` is the
  /// whole entry, libzip's CRC-32 check runs too (one read past the end); a shorter prefix is not checked.
  void read_prefix(const ZipEntry& entry, std::uint64_t bytes,
                   const std::function<void(const char* data, std::size_t size)>& sink) const;
  /// The first `bytes` of the entry straight into `into` (no intermediate copy), with the same checks.
  void read_prefix_into(const ZipEntry& entry, std::uint64_t bytes, char* into) const;
  /// Before `bytes` are allocated for a deflated entry: inflates that much into a small scratch buffer, so that
  /// an entry claiming more than it holds is refused before anything of the claimed size exists (a second
  /// inflation; torch.save writes stored entries, for which this does nothing).
  void prove_prefix(const ZipEntry& entry, std::uint64_t bytes) const;

 private:
  void open(zip_source* from, int error_code_if_null);
  // The first `bytes` of the entry: straight into `into` when given, else through a 1 MiB buffer to `sink`.
  void read(const ZipEntry& entry, std::uint64_t bytes, char* into,
            const std::function<void(const char*, std::size_t)>* sink) const;

  const std::string& source_;
  zip* archive_ = nullptr;
  std::uint64_t file_size_ = 0;
};

/// What a libzip error code means for a torch.save file, in words a user can act on.
std::string zip_error_meaning(int code);

}  // namespace tapegrad::foreign
