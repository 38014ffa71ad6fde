// Pooling. Max pooling saves the argmax of each window; its gradient is a scatter by those indices and
// the scatter's gradient is the matching gather, so every order of derivative is one of the two.
// Average pooling (fixed or adaptive windows) is linear: its gradient spreads each value back over its
// window, and the gradient of that is the average again.
#include <tapegrad/framework/ops/pool.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/max_pool_2x2.h>

namespace tapegrad {

namespace {

// Below this many inner-loop steps a parallel region costs more than it saves.
constexpr std::int64_t kParallelWork = 1 << 15;

// Whether the float32 kernels of kernels/max_pool_2x2 take a plane of disjoint 2x2 windows: rows of at least 4
// windows (its narrowest chunk), and a width whose taps fit the 32-bit offsets it computes.
bool vector_pool_fits(std::int64_t width, std::int64_t out_width) { return out_width >= 4 && width <= (1 << 30); }

struct Planes {
  std::int64_t count, h, w;  // N*C planes of h x w
};

Planes planes_of(const Shape& shape) { return {shape[0] * shape[1], shape[2], shape[3]}; }

// Runs fn(batched input) for a 4-d input, or on a batch of one for a 3-d input, giving back 3-d results.
template <class F>
auto with_batch(const Tensor& input, const char* op, F fn) {
  input.check_defined(op);
  if (input.dim() == 4) return fn(input);
  if (input.dim() != 3)
    fail("{}: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got {}", op, shape_string(input.shape()));
  Shape batched{1};
  batched.insert(batched.end(), input.shape().begin(), input.shape().end());
  auto unbatch = [](const Tensor& t) { return t.reshape(Shape(t.shape().begin() + 1, t.shape().end())); };
  auto result = fn(input.reshape(batched));
  if constexpr (std::is_same_v<decltype(result), Tensor>)
    return unbatch(result);
  else
    return decltype(result){unbatch(result.first), unbatch(result.second)};
}

// One dim's pooling geometry, checked with PyTorch's rules.
std::int64_t pooled_size(const char* op, const Tensor& input, int dim, std::int64_t kernel, std::int64_t stride,
                         std::int64_t padding, std::int64_t dilation, bool ceil_mode) {
  const std::int64_t size = input.size(dim);
  const std::int64_t span = size + 2 * padding - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = span < 0 ? 0 : span / stride + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= size + padding) --out;
  if (out < 1)
    fail("{}: input {} is too small for a kernel of {} with padding {} and dilation {} along dim {}", op,
         shape_string(input.shape()), kernel, padding, dilation, dim);
  // Note: a dilated window can step over a small input entirely (kernel 2, dilation 2, padding 1 on one
  // row). PyTorch then outputs -inf with an index outside the plane; here that is an error instead.
  for (std::int64_t i = 0; i < out; ++i) {
    bool sees_input = false;
    for (std::int64_t k = 0; k < kernel && !sees_input; ++k) {
      const std::int64_t at = i * stride - padding + k * dilation;
      sees_input = at >= 0 && at < size;
    }
    if (!sees_input)
      fail("{}: window {} along dim {} of input {} covers only padding (kernel {}, padding {}, dilation {})", op, i,
           dim, shape_string(input.shape()), kernel, padding, dilation);
  }
  return out;
}

struct PoolGeometry {
  std::int64_t oh, ow;
};

PoolGeometry check_pool(const char* op, const Tensor& input, IntPair kernel, IntPair stride, IntPair padding,
                        IntPair dilation, bool ceil_mode) {
  if (kernel.h < 1 || kernel.w < 1) fail("{}: kernel_size must be positive, got {}", op, kernel.str());
  if (stride.h < 1 || stride.w < 1) fail("{}: stride must be positive, got {}", op, stride.str());
  if (dilation.h < 1 || dilation.w < 1) fail("{}: dilation must be positive, got {}", op, dilation.str());
  if (padding.h < 0 || padding.w < 0 || padding.h > kernel.h / 2 || padding.w > kernel.w / 2)
    fail("{}: padding {} must be non-negative and at most half the kernel size {}", op, padding.str(), kernel.str());
  return {pooled_size(op, input, 2, kernel.h, stride.h, padding.h, dilation.h, ceil_mode),
          pooled_size(op, input, 3, kernel.w, stride.w, padding.w, dilation.w, ceil_mode)};
}

// ---- max pooling: find, scatter, gather ----

// The kernel taps [first, last) of each output position along one dim that land inside the input.
struct TapRange {
  std::vector<std::int64_t> first, last;
};
TapRange valid_taps(std::int64_t size, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                    std::int64_t padding, std::int64_t dilation) {
  TapRange r;
  for (std::int64_t i = 0; i < out; ++i) {
    std::int64_t first = 0, last = kernel;
    while (first < kernel && i * stride - padding + first * dilation < 0) ++first;
    while (last > first && i * stride - padding + (last - 1) * dilation >= size) --last;
    r.first.push_back(first);
    r.last.push_back(last);
  }
  return r;
}

// The common 2x2, stride 2, unpadded, undilated pool, with the four taps written out. Returns false for
// a window holding a NaN, which the general loop then handles.
template <class T>
bool max_pool_2x2(const T* src, std::int64_t width, std::int64_t oh, std::int64_t ow, T& best,
                  std::int64_t& best_index) {
  const std::int64_t top = 2 * oh * width + 2 * ow, bottom = top + width;
  const T a = src[top], b = src[top + 1], c = src[bottom], d = src[bottom + 1];
  if ((a != a) | (b != b) | (c != c) | (d != d)) return false;
  best = a;
  best_index = top;
  bool take = b > best;
  best = take ? b : best;
  best_index = take ? top + 1 : best_index;
  take = c > best;
  best = take ? c : best;
  best_index = take ? bottom : best_index;
  take = d > best;
  best = take ? d : best;
  best_index = take ? bottom + 1 : best_index;
  return true;
}

// One output row of the 2x2 fast path, branch-free so that it vectorises (the per-window version compiled
// to a mispredicted branch). Returns false when some window of the row holds a NaN; the caller then redoes
// the row window by window, which applies PyTorch's NaN rule.
template <class T>
bool max_pool_2x2_row(const T* src, std::int64_t width, std::int64_t oh, std::int64_t out_width, T* __restrict out,
                      std::int64_t* __restrict indices) {
  const T* top = src + 2 * oh * width;
  const T* bottom = top + width;
  const std::int64_t base = 2 * oh * width;
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
    const std::int64_t take_b = b > a, take_d = d > c;
    const T upper = std::max(a, b), lower = std::max(c, d);
    const std::int64_t upper_offset = take_b, lower_offset = width + take_d;
    const std::int64_t take_lower = lower > upper;
    out[ow] = std::max(upper, lower);
    indices[ow] = base + 2 * ow + upper_offset + take_lower * (lower_offset - upper_offset);
  }
  return saw_nan == 0;
}

// How the saved indices were made. Note: the disjoint 2x2 windows (kernel 2, stride 2, no padding, dilation 1, none
// hanging over the edge) have a fast forward, and let the float32 gradient write each input position once, with no
// zero fill first.
enum class PoolWindows { general, disjoint_2x2 };

PoolWindows windows_of(const Planes& in, const PoolGeometry& g, IntPair kernel, IntPair stride, IntPair padding,
                       IntPair dilation) {
  // Note: in ceil mode the last 2x2 window may hang over the edge; the fast paths need all four taps.
  const bool two_by_two = kernel == IntPair(2) && stride == IntPair(2) && padding == IntPair(0) &&
                          dilation == IntPair(1) && 2 * g.oh <= in.h && 2 * g.ow <= in.w;
  return two_by_two ? PoolWindows::disjoint_2x2 : PoolWindows::general;
}

template <class T>
void max_pool_kernel(const T* x, T* out, std::int64_t* indices, const Planes& in, const PoolGeometry& g,
                     IntPair kernel, IntPair stride, IntPair padding, IntPair dilation, PoolWindows windows) {
  const std::int64_t out_plane = g.oh * g.ow;
  const TapRange rows = valid_taps(in.h, g.oh, kernel.h, stride.h, padding.h, dilation.h);
  const TapRange cols = valid_taps(in.w, g.ow, kernel.w, stride.w, padding.w, dilation.w);
  const bool two_by_two = windows == PoolWindows::disjoint_2x2;
  const bool threaded = detail::use_threads(in.count * out_plane * kernel.h * kernel.w, kParallelWork);
  detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
    const T* src = x + p * in.h * in.w;
    if constexpr (std::is_same_v<T, float>) {
      if (two_by_two && vector_pool_fits(in.w, g.ow) &&
          kernels::max_pool_2x2_plane(src, in.w, g.oh, g.ow, out + p * out_plane, indices + p * out_plane))
        return;
    }
    for (std::int64_t oh = 0; oh < g.oh; ++oh) {
      if (two_by_two &&
          max_pool_2x2_row(src, in.w, oh, g.ow, out + p * out_plane + oh * g.ow, indices + p * out_plane + oh * g.ow))
        continue;
      for (std::int64_t ow = 0; ow < g.ow; ++ow) {
        if (two_by_two && max_pool_2x2(src, in.w, oh, ow, out[p * out_plane + oh * g.ow + ow],
                                       indices[p * out_plane + oh * g.ow + ow]))
          continue;
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
        out[p * out_plane + oh * g.ow + ow] = best;
        indices[p * out_plane + oh * g.ow + ow] = best_index;
      }
    }
  });
}

Tensor gather_planes(const Tensor& x, const Tensor& indices, PoolWindows windows);

Tensor record_scatter(Tensor dx, const Tensor& grad, const Tensor& indices, PoolWindows windows) {
  return record_if_needed("max_pool2d_backward", dx, {grad}, [&] {
    return [saved = SavedTensor(indices, "max_pool2d_backward"), windows](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{gather_planes(g, saved.get(), windows)};
    };
  });
}

// dx[plane][indices[plane][j]] += grad[plane][j]: the gradient of max pooling.
Tensor scatter_planes(const Tensor& grad_in, const Tensor& indices_in, const Shape& input_shape, PoolWindows windows) {
  const Tensor grad = grad_in.contiguous(), indices = indices_in.contiguous();
  const Planes in = planes_of(input_shape);
  const std::int64_t oh = indices.size(2), ow = indices.size(3), out_plane = oh * ow;
  const bool threaded = detail::use_threads(indices.numel(), kParallelWork);
  if (windows == PoolWindows::disjoint_2x2 && grad.dtype() == DType::Float32 && vector_pool_fits(in.w, ow)) {
    Tensor dx = empty(input_shape, DType::Float32);
    const float* g = grad.data<float>();
    const std::int64_t* index = indices.data<std::int64_t>();
    float* d = dx.data<float>();
    detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
      kernels::max_pool_2x2_plane_backward(g + p * out_plane, index + p * out_plane, in.h, in.w, oh, ow,
                                           d + p * in.h * in.w);
    });
    return record_scatter(std::move(dx), grad, indices, windows);
  }
  Tensor dx = zeros(input_shape, TensorOptions{}.with_dtype(grad.dtype()));
  detail::dispatch_floating(grad.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    const std::int64_t* index = indices.data<std::int64_t>();
    T* d = dx.data<T>();
    detail::parallel_for(in.count, threaded, [&](std::int64_t p) {
      for (std::int64_t j = p * out_plane; j < (p + 1) * out_plane; ++j) d[p * in.h * in.w + index[j]] += g[j];
    });
  });
  return record_scatter(std::move(dx), grad, indices, windows);
}

// out[plane][j] = x[plane][indices[plane][j]]: the adjoint of scatter_planes.
Tensor gather_planes(const Tensor& x_in, const Tensor& indices_in, PoolWindows windows) {
  const Tensor x = x_in.contiguous(), indices = indices_in.contiguous();
  const Planes in = planes_of(x.shape());
  const std::int64_t out_plane = indices.size(2) * indices.size(3);
  Tensor out = empty(indices.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), "max_pool2d_gather", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    const std::int64_t* index = indices.data<std::int64_t>();
    T* o = out.data<T>();
    for (std::int64_t p = 0; p < in.count; ++p)
      for (std::int64_t j = p * out_plane; j < (p + 1) * out_plane; ++j) o[j] = src[p * in.h * in.w + index[j]];
  });
  return record_if_needed("max_pool2d_gather", out, {x}, [&] {
    return [saved = SavedTensor(indices, "max_pool2d_gather"), shape = x.shape(), windows](const Tensor& g,
                                                                                          NeedsGrad) {
      return std::vector<Tensor>{scatter_planes(g, saved.get(), shape, windows)};
    };
  });
}

std::pair<Tensor, Tensor> max_pool_batched(const Tensor& input_in, IntPair kernel, IntPair stride, IntPair padding,
                                           IntPair dilation, bool ceil_mode) {
  const Tensor input = input_in.contiguous();
  const PoolGeometry g = check_pool("max_pool2d", input, kernel, stride, padding, dilation, ceil_mode);
  const Shape out_shape{input.size(0), input.size(1), g.oh, g.ow};
  const PoolWindows windows = windows_of(planes_of(input.shape()), g, kernel, stride, padding, dilation);
  Tensor indices = empty(out_shape, DType::Int64);
  Tensor out = detail::dispatch_floating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    Tensor result = empty(out_shape, input.dtype());
    max_pool_kernel<T>(input.data<T>(), result.data<T>(), indices.data<std::int64_t>(), planes_of(input.shape()), g,
                       kernel, stride, padding, dilation, windows);
    return result;
  });
  out = record_if_needed("max_pool2d", out, {input}, [&] {
    return [saved = SavedTensor(indices, "max_pool2d"), shape = input.shape(), windows](const Tensor& grad,
                                                                                        NeedsGrad) {
      return std::vector<Tensor>{scatter_planes(grad, saved.get(), shape, windows)};
    };
  });
  return {out, indices};
}

// ---- average pooling: separable windows ----

// Output index i along one dim averages input [start[i], end[i]) with that dim's share of the divisor.
// Note: PyTorch's divisors (window area with or without padding, adaptive window area) are all products
// of a row factor and a column factor, so one separable description covers every average pool.
struct AxisWindows {
  std::vector<std::int64_t> start, end, divisor;
};
struct WindowPlan {
  AxisWindows rows, cols;
};
using PlanPtr = std::shared_ptr<const WindowPlan>;

template <class T, class F>
void for_each_window(const WindowPlan& plan, const Planes& in, F fn) {
  const std::int64_t oh = static_cast<std::int64_t>(plan.rows.start.size());
  const std::int64_t ow = static_cast<std::int64_t>(plan.cols.start.size());
  detail::parallel_for(in.count, detail::use_threads(in.count * in.h * in.w, kParallelWork), [&](std::int64_t p) {
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t rs = plan.rows.start[i], re = plan.rows.end[i];
        const std::int64_t cs = plan.cols.start[j], ce = plan.cols.end[j];
        const std::int64_t divisor = plan.rows.divisor[i] * plan.cols.divisor[j];
        fn(p * in.h * in.w, (p * oh + i) * ow + j, rs, re, cs, ce, divisor);
      }
  });
}

Tensor window_average_backward(const Tensor& grad, const PlanPtr& plan, const Shape& input_shape, const char* op);

Tensor window_average(const Tensor& x_in, const PlanPtr& plan, const char* op) {
  const Tensor x = x_in.contiguous();
  const Shape out_shape{x.size(0), x.size(1), static_cast<std::int64_t>(plan->rows.start.size()),
                        static_cast<std::int64_t>(plan->cols.start.size())};
  Tensor out = empty(out_shape, x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    const Planes in = planes_of(x.shape());
    for_each_window<T>(*plan, in, [&](auto base, auto o, auto rs, auto re, auto cs, auto ce, auto divisor) {
      T total = 0;
      for (std::int64_t h = rs; h < re; ++h)
        for (std::int64_t w = cs; w < ce; ++w) total += src[base + h * in.w + w];
      dst[o] = (rs < re && cs < ce) ? total / static_cast<T>(divisor) : T(0);
    });
  });
  return record_if_needed(op, out, {x}, [&] {
    return [plan, shape = x.shape(), op](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{window_average_backward(g, plan, shape, op)};
    };
  });
}

Tensor window_average_backward(const Tensor& grad_in, const PlanPtr& plan, const Shape& input_shape, const char* op) {
  const Tensor grad = grad_in.contiguous();
  Tensor dx = zeros(input_shape, TensorOptions{}.with_dtype(grad.dtype()));
  detail::dispatch_floating(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    T* d = dx.data<T>();
    const Planes in = planes_of(input_shape);
    // Note: each plane is written by one thread only, so overlapping windows do not race.
    for_each_window<T>(*plan, in, [&](auto base, auto o, auto rs, auto re, auto cs, auto ce, auto divisor) {
      if (rs >= re || cs >= ce) return;
      const T share = g[o] / static_cast<T>(divisor);
      for (std::int64_t h = rs; h < re; ++h)
        for (std::int64_t w = cs; w < ce; ++w) d[base + h * in.w + w] += share;
    });
  });
  const char* name = std::string_view(op) == "avg_pool2d" ? "avg_pool2d_backward" : "adaptive_avg_pool2d_backward";
  return record_if_needed(name, dx, {grad}, [&] {
    return [plan, op](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{window_average(g, plan, op)}; };
  });
}

// PyTorch's avg_pool2d windows along one dim: the divisor counts the padding (but not a ceil-mode overhang
// beyond it) unless count_include_pad is false, when it counts only the input positions.
AxisWindows avg_windows(std::int64_t size, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                        std::int64_t padding, bool count_include_pad) {
  AxisWindows a;
  for (std::int64_t i = 0; i < out; ++i) {
    std::int64_t start = i * stride - padding;
    std::int64_t end = std::min(start + kernel, size + padding);
    const std::int64_t padded = end - start;
    start = std::max<std::int64_t>(start, 0);
    end = std::min(end, size);
    a.start.push_back(start);
    a.end.push_back(end);
    a.divisor.push_back(count_include_pad ? padded : end - start);
  }
  return a;
}

AxisWindows adaptive_windows(std::int64_t size, std::int64_t out) {
  AxisWindows a;
  for (std::int64_t i = 0; i < out; ++i) {
    a.start.push_back(i * size / out);
    a.end.push_back(((i + 1) * size + out - 1) / out);
    a.divisor.push_back(a.end.back() - a.start.back());
  }
  return a;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntPair kernel_size,
                                                  std::optional<IntPair> stride, IntPair padding, IntPair dilation,
                                                  bool ceil_mode) {
  return with_batch(input, "max_pool2d", [&](const Tensor& x) {
    return max_pool_batched(x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode);
  });
}

Tensor max_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride, IntPair padding,
                  IntPair dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride, IntPair padding,
                  bool ceil_mode, bool count_include_pad, std::optional<std::int64_t> divisor_override) {
  if (divisor_override && *divisor_override == 0) fail("avg_pool2d: divisor_override must be non-zero");
  return with_batch(input, "avg_pool2d", [&](const Tensor& x) {
    const IntPair s = stride.value_or(kernel_size);
    const PoolGeometry g = check_pool("avg_pool2d", x, kernel_size, s, padding, 1, ceil_mode);
    auto plan = std::make_shared<WindowPlan>();
    plan->rows = avg_windows(x.size(2), g.oh, kernel_size.h, s.h, padding.h, count_include_pad);
    plan->cols = avg_windows(x.size(3), g.ow, kernel_size.w, s.w, padding.w, count_include_pad);
    if (divisor_override) {
      std::fill(plan->rows.divisor.begin(), plan->rows.divisor.end(), *divisor_override);
      std::fill(plan->cols.divisor.begin(), plan->cols.divisor.end(), 1);
    }
    return window_average(x, plan, "avg_pool2d");
  });
}

Tensor adaptive_avg_pool2d(const Tensor& input, IntPair output_size) {
  if (output_size.h < 0 || output_size.w < 0)
    fail("adaptive_avg_pool2d: output_size must be non-negative, got {}", output_size.str());
  return with_batch(input, "adaptive_avg_pool2d", [&](const Tensor& x) {
    if (x.size(2) < 1 || x.size(3) < 1)
      fail("adaptive_avg_pool2d: expected a non-empty H x W plane, got input {}", shape_string(x.shape()));
    auto plan = std::make_shared<WindowPlan>();
    plan->rows = adaptive_windows(x.size(2), output_size.h);
    plan->cols = adaptive_windows(x.size(3), output_size.w);
    return window_average(x, plan, "adaptive_avg_pool2d");
  });
}

}  // namespace tapegrad
