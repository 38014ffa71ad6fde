#pragma once
// Internal: walking a strided layout one innermost run at a time.
#include <cstdint>
#include <vector>

#include <tapegrad/framework/shape.h>

namespace tapegrad::detail {

/// Calls run(contiguous_offset, strided_offset, inner, inner_stride) once per innermost run of `shape`,
/// where the strided side starts at `base` and moves by `strides` (in elements) along each dim.
template <class F>
void for_each_run(const Shape& shape, const Shape& strides, std::int64_t base, F run) {
  const std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  const std::size_t ndim = shape.size();
  if (ndim == 0) {
    run(0, base, 1, 1);
    return;
  }
  const std::int64_t inner = shape[ndim - 1], inner_stride = strides[ndim - 1];
  std::vector<std::int64_t> index(ndim, 0);
  std::int64_t offset = base;
  for (std::int64_t start = 0; start < n; start += inner) {
    run(start, offset, inner, inner_stride);
    for (std::size_t d = ndim - 1; d-- > 0;) {
      offset += strides[d];
      if (++index[d] < shape[d]) break;
      offset -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace tapegrad::detail
