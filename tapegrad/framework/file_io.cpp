#include <tapegrad/framework/detail/file_io.h>

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tapegrad/framework/error.h>

namespace tapegrad::detail {

namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "it is a FIFO";
  if (S_ISDIR(mode)) return "it is a directory";
  if (S_ISCHR(mode)) return "it is a character device";
  if (S_ISBLK(mode)) return "it is a block device";
  if (S_ISSOCK(mode)) return "it is a socket";
  return "it is not a plain file";
}

struct PathParts {
  std::string dir;   // "." when the path has no directory part
  std::string base;  // the file name
};

PathParts split(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Removes `<base>.tmp-<pid>` regular files whose process is gone. A live process's file (or our own) is left
// alone: it may be a save in progress. Note: a pid reused by an unrelated process keeps its stale file until
// that process exits too; nothing is ever removed that a live save could still be writing.
void remove_stale_temporaries(const PathParts& parts) {
  DIR* dir = ::opendir(parts.dir.c_str());
  if (dir == nullptr) return;
  const std::string prefix = parts.base + ".tmp-";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string full = parts.dir + "/" + name;
    struct stat info {};
    if (::lstat(full.c_str(), &info) == 0 && S_ISREG(info.st_mode)) ::unlink(full.c_str());
  }
  ::closedir(dir);
}

// An unnamed file in `dir` (O_TMPFILE), or -1 when the filesystem or kernel cannot make one, or when
// /proc/self/fd (needed to give it a name) is missing.
int open_unnamed(const std::string& dir) {
#ifdef O_TMPFILE
  if (::access("/proc/self/fd", X_OK) != 0) return -1;
  return ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
  (void)dir;
  return -1;
#endif
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: makes the rename durable; some filesystems refuse fsync on directories
  ::close(fd);
}

}  // namespace

RegularFile::RegularFile(const std::string& path, const char* op, const std::string& hint_when_missing)
    : path_(path), op_(op) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open {}: {}{}", op, path, std::strerror(errno), errno == ENOENT ? hint_when_missing : "");
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int stat_errno = errno;
    ::close(fd_);
    fail("{}: cannot open {}: {}", op, path, std::strerror(stat_errno));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    fail("{}: {} is not a regular file ({})", op, path, file_type_name(info.st_mode));
  }
  size_ = static_cast<std::uint64_t>(info.st_size);
  // Regular files ignore O_NONBLOCK; cleared anyway so the descriptor behaves plainly wherever it is handed.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t RegularFile::read_some(void* data, std::size_t count) {
  std::size_t done = 0;
  while (done < count) {
    const ssize_t n = ::read(fd_, static_cast<char*>(data) + done, count - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: reading {} failed: {}", op_, path_, std::strerror(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

void replace_file(const std::string& path, const char* op, const std::function<bool(std::FILE*)>& write) {
  const PathParts parts = split(path);
  remove_stale_temporaries(parts);
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  const int unnamed = open_unnamed(parts.dir);
  std::FILE* file = unnamed >= 0 ? ::fdopen(unnamed, "wb") : std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    const int open_errno = errno;
    if (unnamed >= 0) ::close(unnamed);
    fail("{}: cannot open {} for writing: {}", op, temporary, std::strerror(open_errno));
  }
  const auto discard = [&] {
    std::fclose(file);
    if (unnamed < 0) std::remove(temporary.c_str());
  };
  bool written = false;
  try {
    written = write(file) && std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  } catch (...) {
    discard();
    throw;
  }
  if (!written) {
    const int write_errno = errno;
    discard();
    fail("{}: writing {} failed: {}", op, temporary, std::strerror(write_errno));
  }
  if (unnamed >= 0) {
    // Note: linkat cannot replace a file, so the unnamed inode is linked to the temporary name first and
    // renamed from there. A regular file already there is a dead save's (or our pid's predecessor's).
    const std::string proc_path = fmt::format("/proc/self/fd/{}", ::fileno(file));
    int linked = ::linkat(AT_FDCWD, proc_path.c_str(), AT_FDCWD, temporary.c_str(), AT_SYMLINK_FOLLOW);
    struct stat existing {};
    if (linked != 0 && errno == EEXIST && ::lstat(temporary.c_str(), &existing) == 0 && S_ISREG(existing.st_mode)) {
      ::unlink(temporary.c_str());
      linked = ::linkat(AT_FDCWD, proc_path.c_str(), AT_FDCWD, temporary.c_str(), AT_SYMLINK_FOLLOW);
    }
    if (linked != 0) {
      const int link_errno = errno;
      std::fclose(file);
      fail("{}: cannot open {} for writing: {}", op, temporary, std::strerror(link_errno));
    }
  }
  if (std::fclose(file) != 0) {
    const int close_errno = errno;
    std::remove(temporary.c_str());
    fail("{}: writing {} failed: {}", op, temporary, std::strerror(close_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    fail("{}: cannot rename {} to {}: {}", op, temporary, path, std::strerror(rename_errno));
  }
  sync_directory(parts.dir);
}

}  // namespace tapegrad::detail
