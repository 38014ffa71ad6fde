// Average pooling (fixed or adaptive windows). It is linear: its gradient spreads each value back over its
// window, and the gradient of that is the average again. Max pooling is in max_pool.cpp.
#include <tapegrad/framework/ops/pool.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/parallel_loop.h>
#include <tapegrad/framework/kernels/pool_nhwc.h>
#include <tapegrad/framework/ops/detail/pool_shape.h>

namespace tapegrad {

namespace {

using detail::check_pool;
using detail::Planes;
using detail::planes_of;
using detail::PoolGeometry;
using detail::with_batch;
constexpr std::int64_t kParallelWork = detail::kPoolParallelWork;

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

Tensor window_average_backward(const Tensor& grad, const PlanPtr& plan, const Shape& input_shape, const char* op,
                                MemoryFormat format);

// The NHWC kernels' view of a plan and of an [N, C, H, W] input pooled by it.
kernels::NhwcAxisWindows nhwc_windows(const AxisWindows& a) { return {a.start.data(), a.end.data(), a.divisor.data()}; }
kernels::NhwcPlanes nhwc_planes(const Shape& input_shape, const WindowPlan& plan) {
  return {input_shape[0], input_shape[2], input_shape[3], input_shape[1],
          static_cast<std::int64_t>(plan.rows.start.size()), static_cast<std::int64_t>(plan.cols.start.size())};
}

// Note: a channels-last input is pooled by the NHWC kernels and gives a channels-last output, whose gradient is
// channels-last too (as PyTorch); any other layout is pooled as row-major planes.
Tensor window_average(const Tensor& x_in, const PlanPtr& plan, const char* op) {
  const MemoryFormat format = detail::dense_format(x_in);
  const Tensor x = x_in.contiguous(format);
  const Shape out_shape{x.size(0), x.size(1), static_cast<std::int64_t>(plan->rows.start.size()),
                        static_cast<std::int64_t>(plan->cols.start.size())};
  Tensor out = empty(out_shape, x.dtype(), format);
  if (format == MemoryFormat::ChannelsLast) {
    detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      kernels::avg_pool_nhwc(x.data<T>(format), nhwc_planes(x.shape(), *plan), nhwc_windows(plan->rows),
                             nhwc_windows(plan->cols), out.data<T>(format));
    });
  } else {
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
  }
  return record_if_needed(op, out, {x}, [&] {
    return [plan, shape = x.shape(), op, format](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{window_average_backward(g, plan, shape, op, format)};
    };
  });
}

// `format` is the forward input's: its gradient takes it.
Tensor window_average_backward(const Tensor& grad_in, const PlanPtr& plan, const Shape& input_shape, const char* op,
                               MemoryFormat format) {
  const Tensor grad = grad_in.contiguous(format);
  Tensor dx;
  if (format == MemoryFormat::ChannelsLast) {
    dx = empty(input_shape, grad.dtype(), format);
    detail::dispatch_floating(grad.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      kernels::avg_pool_nhwc_backward(grad.data<T>(format), nhwc_planes(input_shape, *plan), nhwc_windows(plan->rows),
                                      nhwc_windows(plan->cols), dx.data<T>(format));
    });
  } else {
    dx = zeros(input_shape, TensorOptions{}.with_dtype(grad.dtype()));
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
  }
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
    Tensor out = window_average(x, plan, "avg_pool2d");
    if (trace::active())
      trace::annotate_reported(out, {{"kernel", std::vector<std::int64_t>{kernel_size.h, kernel_size.w}},
                                     {"stride", std::vector<std::int64_t>{s.h, s.w}},
                                     {"padding", std::vector<std::int64_t>{padding.h, padding.w}},
                                     {"ceil_mode", std::int64_t{ceil_mode}},
                                     {"count_include_pad", std::int64_t{count_include_pad}},
                                     {"divisor_override", divisor_override.value_or(0)}});
    return out;
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
