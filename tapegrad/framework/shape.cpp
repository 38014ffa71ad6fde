#include <tapegrad/framework/shape.h>

#include <algorithm>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/error.h>

namespace tapegrad {

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t shape_numel(const Shape& shape) { return checked_numel(shape, "shape"); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    // Note: only a shape with a zero extent further in can overflow here (any other is refused by
    // shape_numel first); its strides never address memory, so saturating is enough.
    if (__builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (std::size_t i = 0; i < ndim; ++i) {
    const std::int64_t da = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const std::int64_t db = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    if (da != db && da != 1 && db != 1)
      fail("{}: shapes {} and {} cannot be broadcast (dim {}: {} vs {})", op, shape_string(a), shape_string(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  const std::int64_t lo = ndim == 0 ? -1 : -ndim;
  const std::int64_t hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi) fail("{}: dim {} is out of range for a tensor of {} dims", op, dim, ndim);
  return dim < 0 ? dim + std::max<std::int64_t>(ndim, 1) : dim;
}

}  // namespace tapegrad
