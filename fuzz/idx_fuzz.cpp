// libFuzzer target for the IDX readers (images and labels, plain and gzip): whatever bytes a file holds,
// read_idx_images() and read_idx_labels() return a tensor or throw tapegrad::Error. Anything else (a crash, a
// sanitizer report, another exception, an allocation beyond what the file can hold, a hang) is a bug.
// Note: the readers take a path, so each input goes into an in-memory file (memfd) reached through
// /proc/self/fd: the real open, fstat, gzip sniffing and zlib path run, and nothing touches the disk.
// Seeds: build/fuzz/fuzz/fuzz_seeds DIR writes DIR/idx_fuzz (scripts/fuzz.sh does this).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include <tapegrad/framework/data/idx.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {
int memory_file() {
  static const int fd = ::memfd_create("idx_fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  return fd;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = memory_file();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const Tensor images = data::read_idx_images(path, /*scale_to_unit=*/true);
    if (images.dim() != 4 || images.size(1) != 1) std::abort();
  } catch (const Error&) {
  }
  try {
    const Tensor labels = data::read_idx_labels(path);
    if (labels.dim() != 1 || labels.dtype() != DType::Int64) std::abort();
  } catch (const Error&) {
  }
  return 0;
}
