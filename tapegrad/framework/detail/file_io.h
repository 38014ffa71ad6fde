#pragma once
/// Files from untrusted paths: opening only regular files without blocking, and replacing a file atomically.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace tapegrad::detail {

/// A read-only descriptor on a path that is known to be a regular file.
/// Note: the open uses O_NONBLOCK, so a FIFO cannot block it (a plain open waits for a writer forever), and
/// fstat then refuses anything that is not a regular file (FIFO, directory, device, socket) before a read.
class RegularFile {
 public:
  /// Throws tapegrad::Error "op: cannot open path: reason[hint]" or "op: path is not a regular file (...)".
  RegularFile(const std::string& path, const char* op, const std::string& hint_when_missing = "");
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  /// The size fstat reported at open.
  std::uint64_t size() const { return size_; }
  /// Reads up to `count` bytes; fewer only at the end of the file. Throws naming the path on a read error.
  std::size_t read_some(void* data, std::size_t count);

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string path_;
  const char* op_;
};

/// Replaces `path` with what `write` puts into a FILE*, so that readers see the old file or the new one, never a
/// part. `write` returns false on a write error (errno set). Throws tapegrad::Error naming `op` and the path.
/// Note: the new content goes into an unnamed O_TMPFILE inode where the filesystem supports it, so a process
/// killed while writing leaves nothing; it gets a name (`path.tmp-PID`) only for the instant before the rename.
/// Elsewhere the temporary is `path.tmp-PID` throughout. Either way each call first removes the `path.tmp-PID`
/// files of processes that no longer exist (a killed save's litter).
void replace_file(const std::string& path, const char* op, const std::function<bool(std::FILE*)>& write);

}  // namespace tapegrad::detail
