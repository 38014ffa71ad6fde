#include <tapegrad/framework/storage.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>
#include <sys/mman.h>
#include <sys/sysinfo.h>

namespace tapegrad {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; also what AVX-512 loads want

std::size_t rounded_bytes(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// Note: a block larger than RAM plus swap can never be backed. Refusing it here, before malloc, makes the
// answer the same under every overcommit setting and under AddressSanitizer (whose allocator aborts on
// absurd sizes instead of returning null); the caller turns bad_alloc into an error naming the shape.
std::size_t backable_bytes() {
  static const std::size_t limit = [] {
    struct sysinfo info {};
    if (::sysinfo(&info) != 0) return SIZE_MAX;
    std::size_t units = 0, total = 0;
    if (__builtin_add_overflow(info.totalram, info.totalswap, &units) ||
        __builtin_mul_overflow(units, std::max<unsigned>(info.mem_unit, 1), &total))
      return SIZE_MAX;
    return total;
  }();
  return limit;
}

// Note: a fresh block of many megabytes costs a page fault and a cleared page per 4 KiB on first touch (a
// 105 MB model load spent a fifth of its time there). Such blocks start on a 2 MiB boundary and are marked
// for transparent huge pages (where the kernel's setting is "madvise", as on Debian), so they fault once
// per 2 MiB. Smaller blocks keep the cache-line alignment and the usual pages.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kMinHugeBlock = 4 * kHugePage;

void* allocate_fresh(std::size_t rounded) {
  if (rounded > backable_bytes()) throw std::bad_alloc();
  const bool huge = rounded >= kMinHugeBlock;
  void* data = std::aligned_alloc(huge ? kHugePage : kAlignment, huge ? (rounded + kHugePage - 1) / kHugePage * kHugePage : rounded);
  if (data == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) ::madvise(data, (rounded + kHugePage - 1) / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only
#endif
  return data;
}

#ifndef TAPEGRAD_NO_CACHING_ALLOCATOR
// Note: a training step allocates and frees the same few dozen large buffers every step. Handed back to
// malloc, big blocks go back to the kernel (mmap'd or trimmed) and come back as fresh zeroed pages, so every
// step paid page faults and page clearing. This cache keeps freed blocks of >= kMinCachedBytes by exact
// rounded size and hands them out again. It is per thread (no lock; a block freed on another thread joins
// that thread's cache), holds at most kMaxCachedBytes, and frees everything when its thread exits.
// Sanitizer builds compile it out (TAPEGRAD_NO_CACHING_ALLOCATOR), so ASan still sees every use after free.
constexpr std::size_t kMinCachedBytes = 4096;
constexpr std::size_t kMaxCachedBytes = std::size_t{512} << 20;

class BlockCache {
 public:
  ~BlockCache();
  void* take(std::size_t rounded) {
    auto found = free_.find(rounded);
    if (found == free_.end() || found->second.empty()) return nullptr;
    void* data = found->second.back();
    found->second.pop_back();
    cached_bytes_ -= rounded;
    return data;
  }
  bool give(void* data, std::size_t rounded) {
    if (cached_bytes_ + rounded > kMaxCachedBytes) return false;
    free_[rounded].push_back(data);
    cached_bytes_ += rounded;
    return true;
  }

 private:
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_bytes_ = 0;
};

// Note: trivially destructible, so it can still be read while a thread's (or the process's) objects are
// being destroyed: a tensor that dies after its thread's cache (a static, say) frees its block directly.
enum class CacheState : unsigned char { unused, alive, destroyed };
thread_local CacheState cache_state = CacheState::unused;

BlockCache::~BlockCache() {
  cache_state = CacheState::destroyed;
  for (auto& [size, blocks] : free_)
    for (void* data : blocks) std::free(data);
}

BlockCache* thread_cache() {
  if (cache_state == CacheState::destroyed) return nullptr;
  thread_local BlockCache cache;
  cache_state = CacheState::alive;
  return &cache;
}

void* allocate(std::size_t rounded) {
  if (rounded >= kMinCachedBytes)
    if (BlockCache* cache = thread_cache())
      if (void* data = cache->take(rounded)) return data;
  return allocate_fresh(rounded);
}

void deallocate(void* data, std::size_t rounded) {
  if (rounded >= kMinCachedBytes)
    if (BlockCache* cache = thread_cache())
      if (cache->give(data, rounded)) return;
  std::free(data);
}
#else
void* allocate(std::size_t rounded) { return allocate_fresh(rounded); }
void deallocate(void* data, std::size_t) { std::free(data); }
#endif

}  // namespace

Storage::Storage(std::size_t bytes) : data_(allocate(rounded_bytes(bytes))), bytes_(bytes) {}

Storage::~Storage() { deallocate(data_, rounded_bytes(bytes_)); }

}  // namespace tapegrad
