#pragma once
/// Overflow-checked products and sums for element counts and byte counts, throwing tapegrad::Error.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/shape.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

// Note: a shape or a size read from a file is untrusted. Multiplying extents unchecked wraps (signed
// overflow is even undefined), and a wrapped count of 0 or a small number passes every later check and then
// indexes far outside the allocation. Every count that sizes memory or bounds a loop goes through here.

/// a * b for non-negative counts; throws naming `what` when the product exceeds int64.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t out = 0;
  if (a < 0 || b < 0) fail("{}: negative count ({} x {})", what, a, b);
  if (__builtin_mul_overflow(a, b, &out)) fail("{}: {} x {} overflows a 64-bit count", what, a, b);
  return out;
}

/// a + b for non-negative counts; throws naming `what` when the sum exceeds int64.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t out = 0;
  if (a < 0 || b < 0) fail("{}: negative count ({} + {})", what, a, b);
  if (__builtin_add_overflow(a, b, &out)) fail("{}: {} + {} overflows a 64-bit count", what, a, b);
  return out;
}

/// The element count of `shape`, checking each extent is >= 0 and the product fits int64; errors name `what` and
/// the shape.
inline std::int64_t checked_numel(const Shape& shape, const char* what) {
  std::int64_t n = 1;
  for (const auto extent : shape)
    if (extent < 0) fail("{}: negative dimension {} in shape {}", what, extent, shape_string(shape));
  // Note: a zero extent anywhere makes the count 0 however large the others are (PyTorch accepts
  // {0, 2^62}); checking overflow only on the non-zero extents keeps that legal.
  for (const auto extent : shape)
    if (extent == 0) return 0;
  for (const auto extent : shape)
    if (__builtin_mul_overflow(n, extent, &n))
      fail("{}: shape {} has more elements than a 64-bit count holds", what, shape_string(shape));
  return n;
}

/// numel * element_size as a byte count; throws naming `what` and the shape when it exceeds what memory can address.
inline std::size_t checked_bytes(const Shape& shape, std::size_t element_size, const char* what) {
  const std::int64_t numel = checked_numel(shape, what);
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(element_size), &bytes) ||
      static_cast<std::uint64_t>(bytes) > std::numeric_limits<std::size_t>::max())
    fail("{}: shape {} of {}-byte elements needs more bytes than a 64-bit count holds", what, shape_string(shape),
         element_size);
  return static_cast<std::size_t>(bytes);
}

}  // namespace tapegrad

TAPEGRAD_API_END
