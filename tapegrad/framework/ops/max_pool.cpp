// Max pooling. It saves the argmax of each window; its gradient is a scatter by that argmax and the scatter's
// gradient is the matching gather, so every order of derivative is one of the two. Disjoint 2x2 windows (the
// usual CNN's pool) save the argmax as a one-byte tap, every other window as an int64 index in the plane.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/max_pool_2x2.h>
#include <tapegrad/framework/ops/detail/max_pool_nhwc.h>
#include <tapegrad/framework/ops/detail/pool_shape.h>
#include <tapegrad/framework/ops/pool.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad {

namespace {

// Whether the float32 kernels of kernels/max_pool_2x2 take a plane of disjoint 2x2 windows: rows of at least 4
// windows (its narrowest chunk).
bool vector_pool_fits(std::int64_t out_width) { return out_width >= 4; }

using detail::TapRange;
using detail::valid_taps;

// The argmax of a disjoint 2x2 window is saved as its tap: 0 top-left, 1 top-right, 2 bottom-left, 3
// bottom-right. Note: one byte per output instead of an int64 index: the index was 3.2 MB of the forward's
// writes and the backward's reads per 64x32x28x28 pool, about a quarter of each pass's memory traffic.
using Taps = std::shared_ptr<const Storage>;

// Where tap `tap` of output j (of a plane out_width wide) lies in its input plane (row stride `width`).
std::int64_t tap_offset(std::int64_t j, std::int64_t out_width, std::int64_t width, std::uint8_t tap) {
  return (2 * (j / out_width) + (tap >> 1)) * width + 2 * (j % out_width) + (tap & 1);
}

// The 2x2 window (oh, ow) with the four taps written out. Returns false for a window holding a NaN, which the
// general loop then handles.
template <class T>
bool max_pool_2x2(const T* src, std::int64_t width, std::int64_t oh, std::int64_t ow, T& best, std::uint8_t& tap) {
  const std::int64_t top = 2 * oh * width + 2 * ow, bottom = top + width;
  const T a = src[top], b = src[top + 1], c = src[bottom], d = src[bottom + 1];
  if ((a != a) | (b != b) | (c != c) | (d != d)) return false;
  best = a;
  tap = 0;
  bool take = b > best;
  best = take ? b : best;
  tap = take ? 1 : tap;
  take = c > best;
  best = take ? c : best;
  tap = take ? 2 : tap;
  take = d > best;
  best = take ? d : best;
  tap = take ? 3 : tap;
  return true;
}

// One output row of the 2x2 fast path, branch-free so that it vectorises (the per-window version compiled
// to a mispredicted branch). Returns false when some window of the row holds a NaN; the caller then redoes
// the row window by window, which applies PyTorch's NaN rule.
template <class T>
bool max_pool_2x2_row(const T* src, std::int64_t width, std::int64_t oh, std::int64_t out_width, T* __restrict out,
                      std::uint8_t* __restrict taps) {
  const T* top = src + 2 * oh * width;
  const T* bottom = top + width;
  int saw_nan = 0;  // Note: an int, not a bool: GCC 12 does not vectorise a bool | reduction
#pragma omp simd reduction(| : saw_nan)
  for (std::int64_t ow = 0; ow < out_width; ++ow) {
    const T a = top[2 * ow], b = top[2 * ow + 1], c = bottom[2 * ow], d = bottom[2 * ow + 1];
    saw_nan |= ((a != a) | (b != b) | (c != c) | (d != d)) ? 1 : 0;
    // Note: the first maximum of each pair, then the lower pair only if strictly greater: without NaNs that
    // is the first maximum in the general loop's tap order (a, b, c, d).
    // Note: the selections are max instructions and 0/1 integers, not ternaries: the rows are 14 and 7 wide
    // in the usual CNN, shorter than a 16-float vector, so they run in the loop's scalar epilogue, where GCC
    // compiled the ternaries to branches that random data mispredicts (19% of cnn training was this loop).
    const int take_b = b > a, take_d = d > c;
    const T upper = std::max(a, b), lower = std::max(c, d);
    const int take_lower = lower > upper;
    out[ow] = std::max(upper, lower);
    taps[ow] = static_cast<std::uint8_t>(take_b + take_lower * (2 + take_d - take_b));
  }
  return saw_nan == 0;
}

// Which windows a pool has. Note: the disjoint 2x2 windows (kernel 2, stride 2, no padding, dilation 1, none
// hanging over the edge) have fast forward paths, save taps instead of indices, and let the float32 gradient
// write each input position once, with no zero fill first.
enum class PoolWindows { general, disjoint_2x2 };

PoolWindows windows_of(const detail::Planes& in, const detail::PoolGeometry& g, IntPair kernel, IntPair stride,
                       IntPair padding, IntPair dilation) {
  // Note: in ceil mode the last 2x2 window may hang over the edge; the fast paths need all four taps.
  const bool two_by_two = kernel == IntPair(2) && stride == IntPair(2) && padding == IntPair(0) &&
                          dilation == IntPair(1) && 2 * g.oh <= in.h && 2 * g.ow <= in.w;
  return two_by_two ? PoolWindows::disjoint_2x2 : PoolWindows::general;
}

// Pools every plane. Disjoint 2x2 windows write each argmax as a tap to `taps`, others as an offset in the plane
// to `indices` (the other pointer is null).
template <class T>
void max_pool_kernel(const T* x, T* out, std::int64_t* indices, std::uint8_t* taps, const detail::Planes& in,
                     const detail::PoolGeometry& g, IntPair kernel, IntPair stride, IntPair padding, IntPair dilation,
                     PoolWindows windows) {
  const std::int64_t out_plane = g.oh * g.ow;
  const TapRange rows = valid_taps(in.h, g.oh, kernel.h, stride.h, padding.h, dilation.h);
  const TapRange cols = valid_taps(in.w, g.ow, kernel.w, stride.w, padding.w, dilation.w);
  const bool two_by_two = windows == PoolWindows::disjoint_2x2;
  const bool threaded = detail::use_threads(in.count * out_plane * kernel.h * kernel.w, detail::kPoolParallelWork);
  detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
    const T* src = x + p * in.h * in.w;
    T* plane_out = out + p * out_plane;
    std::uint8_t* plane_taps = two_by_two ? taps + p * out_plane : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (two_by_two && vector_pool_fits(g.ow) &&
          kernels::max_pool_2x2_plane(src, in.w, g.oh, g.ow, plane_out, plane_taps))
        return;
    }
    for (std::int64_t oh = 0; oh < g.oh; ++oh) {
      if (two_by_two && max_pool_2x2_row(src, in.w, oh, g.ow, plane_out + oh * g.ow, plane_taps + oh * g.ow))
        continue;
      for (std::int64_t ow = 0; ow < g.ow; ++ow) {
        const std::int64_t j = oh * g.ow + ow;
        if (two_by_two && max_pool_2x2(src, in.w, oh, ow, plane_out[j], plane_taps[j])) continue;
        const std::int64_t h0 = oh * stride.h - padding.h, w0 = ow * stride.w - padding.w;
        T best = -std::numeric_limits<T>::infinity();
        std::int64_t best_index = (h0 + rows.first[oh] * dilation.h) * in.w + w0 + cols.first[ow] * dilation.w;
        bool saw_nan = false;
        // Note: strict '>' keeps the first maximum. The loop is written so that it compiles to max and
        // conditional moves: on random data a branch here is mispredicted half the time.
        for (std::int64_t ki = rows.first[oh]; ki < rows.last[oh]; ++ki)
          for (std::int64_t kj = cols.first[ow]; kj < cols.last[ow]; ++kj) {
            const std::int64_t at = (h0 + ki * dilation.h) * in.w + w0 + kj * dilation.w;
            const T v = src[at];
            const bool take = v > best;
            saw_nan |= v != v;
            best = take ? v : best;
            best_index = take ? at : best_index;
          }
        if (saw_nan) {
          // PyTorch's rule, for the rare window holding a NaN: every NaN wins over what came before it.
          for (std::int64_t ki = rows.first[oh]; ki < rows.last[oh]; ++ki)
            for (std::int64_t kj = cols.first[ow]; kj < cols.last[ow]; ++kj) {
              const std::int64_t at = (h0 + ki * dilation.h) * in.w + w0 + kj * dilation.w;
              if (std::isnan(src[at])) best = src[at], best_index = at;
            }
        }
        plane_out[j] = best;
        if (two_by_two)
          plane_taps[j] = static_cast<std::uint8_t>(2 * (best_index / in.w - 2 * oh) + best_index % in.w - 2 * ow);
        else
          indices[p * out_plane + j] = best_index;
      }
    }
  });
}

// The int64 indices (flattened within each plane, as PyTorch returns them) of saved taps.
Tensor indices_of_taps(const Taps& taps, const Shape& out_shape, std::int64_t width) {
  Tensor indices = empty(out_shape, DType::Int64);
  const std::uint8_t* tap = static_cast<const std::uint8_t*>(taps->data());
  std::int64_t* index = indices.data<std::int64_t>();
  const std::int64_t out_width = out_shape[3], out_plane = out_shape[2] * out_width;
  for (std::int64_t k = 0; k < indices.numel(); ++k) index[k] = tap_offset(k % out_plane, out_width, width, tap[k]);
  return indices;
}

// ---- the gradient of max pooling: a scatter by the saved argmax, whose gradient is the matching gather ----

// What max pooling saves of each output [N, C, oh, ow]: its argmax, as one-byte taps for disjoint 2x2 windows,
// else as int64 offsets in the input plane.
struct Argmax {
  Taps taps;            // set for disjoint 2x2 windows
  SavedTensor indices;  // otherwise
  Shape out_shape;
};

// The argmax offsets of one plane after another, read from either form.
class ArgmaxPlanes {
 public:
  ArgmaxPlanes(const Argmax& argmax, std::int64_t width)
      : tap_(argmax.taps ? static_cast<const std::uint8_t*>(argmax.taps->data()) : nullptr),
        index_(argmax.taps ? nullptr : argmax.indices.get().data<std::int64_t>()),
        out_width_(argmax.out_shape[3]),
        out_plane_(argmax.out_shape[2] * argmax.out_shape[3]),
        width_(width) {}

  std::int64_t out_plane() const { return out_plane_; }

  // fn(j, offset) for each output j of plane p, offset being its argmax's place in the input plane.
  template <class F>
  void for_each(std::int64_t p, F fn) const {
    if (tap_) {
      const std::uint8_t* tap = tap_ + p * out_plane_;
      for (std::int64_t j = 0; j < out_plane_; ++j) fn(j, tap_offset(j, out_width_, width_, tap[j]));
    } else {
      const std::int64_t* index = index_ + p * out_plane_;
      for (std::int64_t j = 0; j < out_plane_; ++j) fn(j, index[j]);
    }
  }

 private:
  const std::uint8_t* tap_;
  const std::int64_t* index_;
  std::int64_t out_width_, out_plane_, width_;
};

Tensor gather_planes(const Tensor& x, const Argmax& argmax);

// dx[plane][argmax of j] += grad[plane][j].
Tensor scatter_planes(const Tensor& grad_in, const Argmax& argmax, const Shape& input_shape) {
  const Tensor grad = grad_in.contiguous();
  const detail::Planes in = detail::planes_of(input_shape);
  const ArgmaxPlanes planes(argmax, in.w);
  const std::int64_t out_plane = planes.out_plane();
  const bool threaded = detail::use_threads(grad.numel(), detail::kPoolParallelWork);
  Tensor dx;
  if (argmax.taps && grad.dtype() == DType::Float32 && vector_pool_fits(argmax.out_shape[3])) {
    // Note: disjoint windows reach each input position at most once, so the kernel writes whole planes, zeros
    // included, with no fill first.
    dx = empty(input_shape, DType::Float32);
    const float* g = grad.data<float>();
    const std::uint8_t* tap = static_cast<const std::uint8_t*>(argmax.taps->data());
    float* d = dx.data<float>();
    detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
      kernels::max_pool_2x2_plane_backward(g + p * out_plane, tap + p * out_plane, in.h, in.w, argmax.out_shape[2],
                                           argmax.out_shape[3], d + p * in.h * in.w);
    });
  } else {
    dx = zeros(input_shape, TensorOptions{}.with_dtype(grad.dtype()));
    detail::dispatch_floating(grad.dtype(), "max_pool2d_backward", [&](auto tag) {
      using T = decltype(tag);
      const T* g = grad.data<T>();
      T* d = dx.data<T>();
      detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
        planes.for_each(p, [&](std::int64_t j, std::int64_t offset) {
          d[p * in.h * in.w + offset] += g[p * out_plane + j];
        });
      });
    });
  }
  return record_if_needed("max_pool2d_backward", dx, {grad}, [&] {
    return [argmax](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{gather_planes(g, argmax)}; };
  });
}

// out[plane][j] = x[plane][argmax of j]: the adjoint of scatter_planes.
Tensor gather_planes(const Tensor& x_in, const Argmax& argmax) {
  const Tensor x = x_in.contiguous();
  const detail::Planes in = detail::planes_of(x.shape());
  const ArgmaxPlanes planes(argmax, in.w);
  const std::int64_t out_plane = planes.out_plane();
  Tensor out = empty(argmax.out_shape, x.dtype());
  detail::dispatch_floating(x.dtype(), "max_pool2d_gather", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* o = out.data<T>();
    for (std::int64_t p = 0; p < in.count; ++p)
      planes.for_each(p, [&](std::int64_t j, std::int64_t offset) {
        o[p * out_plane + j] = src[p * in.h * in.w + offset];
      });
  });
  return record_if_needed("max_pool2d_gather", out, {x}, [&] {
    return [argmax, shape = x.shape()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{scatter_planes(g, argmax, shape)};
    };
  });
}

// The pooled values, and their int64 indices when `want_indices` (else an undefined tensor).
// Note: a channels-last input takes the NHWC kernels (ops/max_pool_nhwc.cpp) and gives a channels-last output.
std::pair<Tensor, Tensor> max_pool_batched(const Tensor& input_in, IntPair kernel, IntPair stride, IntPair padding,
                                           IntPair dilation, bool ceil_mode, bool want_indices) {
  if (detail::is_strictly_channels_last(input_in))
    return detail::max_pool_nhwc(input_in, kernel, stride, padding, dilation, ceil_mode, want_indices);
  const Tensor input = input_in.contiguous();
  const detail::PoolGeometry g = detail::check_pool("max_pool2d", input, kernel, stride, padding, dilation, ceil_mode);
  const Shape out_shape{input.size(0), input.size(1), g.oh, g.ow};
  const detail::Planes in = detail::planes_of(input.shape());
  const PoolWindows windows = windows_of(in, g, kernel, stride, padding, dilation);
  std::shared_ptr<Storage> taps;
  Tensor indices;
  if (windows == PoolWindows::disjoint_2x2)
    taps = std::make_shared<Storage>(static_cast<std::size_t>(std::max<std::int64_t>(shape_numel(out_shape), 1)));
  else
    indices = empty(out_shape, DType::Int64);
  Tensor out = detail::dispatch_floating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    Tensor result = empty(out_shape, input.dtype());
    max_pool_kernel<T>(input.data<T>(), result.data<T>(), taps ? nullptr : indices.data<std::int64_t>(),
                       taps ? static_cast<std::uint8_t*>(taps->data()) : nullptr, in, g, kernel, stride, padding,
                       dilation, windows);
    return result;
  });
  detail::annotate_max_pool(out, kernel, stride, padding, dilation, ceil_mode);
  out = record_if_needed("max_pool2d", out, {input}, [&] {
    Argmax argmax{taps, taps ? SavedTensor() : SavedTensor(indices, "max_pool2d"), out_shape};
    return [argmax = std::move(argmax), shape = input.shape()](const Tensor& grad, NeedsGrad) {
      return std::vector<Tensor>{scatter_planes(grad, argmax, shape)};
    };
  });
  if (!want_indices) return {out, Tensor()};
  return {out, taps ? indices_of_taps(taps, out_shape, in.w) : indices};
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntPair kernel_size,
                                                  std::optional<IntPair> stride, IntPair padding, IntPair dilation,
                                                  bool ceil_mode) {
  return detail::with_batch(input, "max_pool2d", [&](const Tensor& x) {
    return max_pool_batched(x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode, true);
  });
}

Tensor max_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride, IntPair padding,
                  IntPair dilation, bool ceil_mode) {
  return detail::with_batch(input, "max_pool2d", [&](const Tensor& x) {
    return max_pool_batched(x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode, false).first;
  });
}

}  // namespace tapegrad
