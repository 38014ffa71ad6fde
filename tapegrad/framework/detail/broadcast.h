#pragma once
// Internal: the one loop every broadcasting elementwise kernel goes through.
#include <cstdint>
#include <vector>

#include <tapegrad/framework/shape.h>

namespace tapegrad::detail {

/// Strides of `shape` (in elements) when broadcast to `out_shape`: 0 along broadcast dims.
inline Shape broadcast_strides(const Shape& shape, const Shape& out_shape) {
  Shape strides(out_shape.size(), 0);
  const Shape own = contiguous_strides(shape);
  const std::size_t offset = out_shape.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) strides[offset + i] = shape[i] == 1 ? 0 : own[i];
  return strides;
}

/// out[i] = f(a[ia], b[ib]) over out_shape with NumPy broadcasting. Same shapes and scalar operands take
/// a flat loop the compiler vectorises; the general case runs the innermost dim as a strided loop.
template <class T, class F>
void broadcast_binary(const T* a, const Shape& a_shape, const T* b, const Shape& b_shape, T* out,
                      const Shape& out_shape, F f) {
  const std::int64_t n = shape_numel(out_shape);
  const std::int64_t na = shape_numel(a_shape), nb = shape_numel(b_shape);
  if (na == n && nb == n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    return;
  }
  if (nb == 1 && na == n) {
    const T bv = b[0];
    for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
    return;
  }
  if (na == 1 && nb == n) {
    const T av = a[0];
    for (std::int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
    return;
  }
  if (n == 0) return;
  const std::size_t ndim = out_shape.size();
  const Shape sa = broadcast_strides(a_shape, out_shape), sb = broadcast_strides(b_shape, out_shape);
  const std::int64_t inner = out_shape[ndim - 1], ia = sa[ndim - 1], ib = sb[ndim - 1];
  std::vector<std::int64_t> index(ndim, 0);
  std::int64_t offset_a = 0, offset_b = 0;
  for (std::int64_t base = 0; base < n; base += inner) {
    T* o = out + base;
    const T* pa = a + offset_a;
    const T* pb = b + offset_b;
    if (ia == 1 && ib == 1)
      for (std::int64_t k = 0; k < inner; ++k) o[k] = f(pa[k], pb[k]);
    else if (ia == 1 && ib == 0)
      for (std::int64_t k = 0; k < inner; ++k) o[k] = f(pa[k], pb[0]);
    else if (ia == 0 && ib == 1)
      for (std::int64_t k = 0; k < inner; ++k) o[k] = f(pa[0], pb[k]);
    else
      for (std::int64_t k = 0; k < inner; ++k) o[k] = f(pa[k * ia], pb[k * ib]);
    // advance the odometer over the outer dims
    for (std::size_t d = ndim - 1; d-- > 0;) {
      offset_a += sa[d];
      offset_b += sb[d];
      if (++index[d] < out_shape[d]) break;
      offset_a -= sa[d] * out_shape[d];
      offset_b -= sb[d] * out_shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace tapegrad::detail
