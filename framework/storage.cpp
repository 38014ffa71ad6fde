#include "framework/storage.h"

#include <cstdlib>
#include <new>

namespace tapegrad {

namespace {
constexpr std::size_t kAlignment = 64;  // a cache line; also what AVX-512 loads want
}

Storage::Storage(std::size_t bytes) : bytes_(bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (data_ == nullptr) throw std::bad_alloc();
}

Storage::~Storage() { std::free(data_); }

}  // namespace tapegrad
