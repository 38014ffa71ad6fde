#pragma once
/// A reference-counted, 64-byte aligned block of elements shared by tensor handles and views.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Note: the version counter lives here, not in the tensor handle, so that an in-place write through
/// any view (reshape shares storage) is seen by every saved tensor that aliases the same memory.
class Storage {
 public:
  explicit Storage(std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint64_t version_ = 0;
};

}  // namespace tapegrad

TAPEGRAD_API_END
