// Max pooling of channels-last tensors: the NHWC kernels (kernels/pool_nhwc.h) and their records. The argmax is
// saved as int64 indices in the input plane (PyTorch's indices), one per output element in NHWC order; the
// gradient is their scatter and the scatter's gradient the matching gather, as in max_pool.cpp, so every order of
// derivative stays channels-last. Disjoint 2x2 windows (the usual CNN's pool) save the argmax as a one-byte tap
// instead (kernels/max_pool_2x2_nhwc.h), as the NCHW op does; their int64 indices are made only when asked for.
#include <tapegrad/framework/ops/detail/max_pool_nhwc.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/kernels/max_pool_2x2_nhwc.h>
#include <tapegrad/framework/kernels/pool_nhwc.h>
#include <tapegrad/framework/ops/detail/pool_shape.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad {

namespace {

constexpr MemoryFormat kNhwc = MemoryFormat::ChannelsLast;

kernels::NhwcPlanes nhwc_planes(const Shape& input_shape, const Shape& out_shape) {
  return {input_shape[0], input_shape[2], input_shape[3], input_shape[1], out_shape[2], out_shape[3]};
}

Tensor gather_nhwc(const Tensor& x, const SavedTensor& indices, const Shape& out_shape);

// dx[n, argmax, c] += grad[n, i, j, c].
Tensor scatter_nhwc(const Tensor& grad_in, const SavedTensor& indices, const Shape& input_shape) {
  const Tensor grad = grad_in.contiguous(kNhwc);
  Tensor dx = empty(input_shape, grad.dtype(), kNhwc);
  detail::dispatch_floating(grad.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    kernels::max_pool_nhwc_backward(grad.data<T>(kNhwc), indices.get().data<std::int64_t>(kNhwc),
                                    nhwc_planes(input_shape, grad.shape()), dx.data<T>(kNhwc));
  });
  return record_if_needed("max_pool2d_backward", dx, {grad}, [&] {
    return [indices, out_shape = grad.shape()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{gather_nhwc(g, indices, out_shape)};
    };
  });
}

// out[n, i, j, c] = x[n, argmax, c]: the adjoint of scatter_nhwc.
Tensor gather_nhwc(const Tensor& x_in, const SavedTensor& indices, const Shape& out_shape) {
  const Tensor x = x_in.contiguous(kNhwc);
  Tensor out = empty(out_shape, x.dtype(), kNhwc);
  detail::dispatch_floating(x.dtype(), "max_pool2d_gather", [&](auto tag) {
    using T = decltype(tag);
    kernels::max_pool_nhwc_gather(x.data<T>(kNhwc), indices.get().data<std::int64_t>(kNhwc),
                                  nhwc_planes(x.shape(), out_shape), out.data<T>(kNhwc));
  });
  return record_if_needed("max_pool2d_gather", out, {x}, [&] {
    return [indices, shape = x.shape()](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{scatter_nhwc(g, indices, shape)};
    };
  });
}

// ---- disjoint 2x2 windows: one-byte taps (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) ----

using Taps = std::shared_ptr<const Storage>;

bool disjoint_2x2(const Tensor& input, const detail::PoolGeometry& g, IntPair kernel, IntPair stride,
                  IntPair padding, IntPair dilation) {
  // Note: in ceil mode the last window may hang over the edge; the 2x2 kernels need all four taps.
  return kernel == IntPair(2) && stride == IntPair(2) && padding == IntPair(0) && dilation == IntPair(1) &&
         2 * g.oh <= input.size(2) && 2 * g.ow <= input.size(3);
}

kernels::Nhwc2x2 planes_2x2(const Shape& input_shape, const Shape& out_shape) {
  return {input_shape[0], input_shape[2], input_shape[3], input_shape[1], out_shape[2], out_shape[3]};
}

// PyTorch's int64 indices (the place in the input plane, h * width + w), channels-last, of saved taps.
Tensor indices_of_taps(const Taps& taps, const Shape& out_shape, std::int64_t width) {
  Tensor indices = empty(out_shape, DType::Int64, kNhwc);
  const std::uint8_t* tap = static_cast<const std::uint8_t*>(taps->data());
  std::int64_t* index = indices.data<std::int64_t>(kNhwc);
  const std::int64_t c = out_shape[1], oh = out_shape[2], ow = out_shape[3];
  for (std::int64_t k = 0; k < indices.numel(); ++k) {
    const std::int64_t at = k / c, i = at / ow % oh, j = at % ow;
    index[k] = (2 * i + (tap[k] >> 1)) * width + 2 * j + (tap[k] & 1);
  }
  return indices;
}

// dx = grad at each window's tap, 0 elsewhere. Its gradient is gather_nhwc by the taps' int64 indices, made only
// when a second derivative asks for them.
Tensor scatter_taps_nhwc(const Tensor& grad_in, const Taps& taps, const Shape& input_shape) {
  const Tensor grad = grad_in.contiguous(kNhwc);
  Tensor dx = empty(input_shape, grad.dtype(), kNhwc);
  detail::dispatch_floating(grad.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    kernels::max_pool_2x2_nhwc_backward(grad.data<T>(kNhwc), static_cast<const std::uint8_t*>(taps->data()),
                                        planes_2x2(input_shape, grad.shape()), dx.data<T>(kNhwc));
  });
  return record_if_needed("max_pool2d_backward", dx, {grad}, [&] {
    return [taps, out_shape = grad.shape(), width = input_shape[3]](const Tensor& g, NeedsGrad) {
      const SavedTensor indices(indices_of_taps(taps, out_shape, width), "max_pool2d");
      return std::vector<Tensor>{gather_nhwc(g, indices, out_shape)};
    };
  });
}

std::pair<Tensor, Tensor> max_pool_2x2_taps(const Tensor& input, const Shape& out_shape, bool ceil_mode,
                                            bool want_indices) {
  auto taps = std::make_shared<Storage>(static_cast<std::size_t>(std::max<std::int64_t>(shape_numel(out_shape), 1)));
  Tensor out = empty(out_shape, input.dtype(), kNhwc);
  detail::dispatch_floating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::max_pool_2x2_nhwc(input.data<T>(kNhwc), planes_2x2(input.shape(), out_shape), out.data<T>(kNhwc),
                               static_cast<std::uint8_t*>(taps->data()));
  });
  detail::annotate_max_pool(out, IntPair(2), IntPair(2), IntPair(0), IntPair(1), ceil_mode);
  out = record_if_needed("max_pool2d", out, {input}, [&] {
    return [taps = Taps(taps), shape = input.shape()](const Tensor& grad, NeedsGrad) {
      return std::vector<Tensor>{scatter_taps_nhwc(grad, taps, shape)};
    };
  });
  return {out, want_indices ? indices_of_taps(taps, out_shape, input.size(3)) : Tensor()};
}

}  // namespace

void detail::annotate_max_pool(const Tensor& out, IntPair kernel, IntPair stride, IntPair padding,
                               IntPair dilation, bool ceil_mode) {
  if (trace::active())
    trace::annotate(out, {{"kernel", std::vector<std::int64_t>{kernel.h, kernel.w}},
                          {"stride", std::vector<std::int64_t>{stride.h, stride.w}},
                          {"padding", std::vector<std::int64_t>{padding.h, padding.w}},
                          {"dilation", std::vector<std::int64_t>{dilation.h, dilation.w}},
                          {"ceil_mode", std::int64_t{ceil_mode}}});
}

std::pair<Tensor, Tensor> detail::max_pool_nhwc(const Tensor& input, IntPair kernel, IntPair stride, IntPair padding,
                                                IntPair dilation, bool ceil_mode, bool want_indices) {
  const detail::PoolGeometry g = detail::check_pool("max_pool2d", input, kernel, stride, padding, dilation, ceil_mode);
  const Shape out_shape{input.size(0), input.size(1), g.oh, g.ow};
  if (disjoint_2x2(input, g, kernel, stride, padding, dilation))
    return max_pool_2x2_taps(input, out_shape, ceil_mode, want_indices);
  const TapRange rows = valid_taps(input.size(2), g.oh, kernel.h, stride.h, padding.h, dilation.h);
  const TapRange cols = valid_taps(input.size(3), g.ow, kernel.w, stride.w, padding.w, dilation.w);
  const kernels::NhwcMaxWindows windows{stride.h,          stride.w,         padding.h,         padding.w,
                                        dilation.h,        dilation.w,       rows.first.data(), rows.last.data(),
                                        cols.first.data(), cols.last.data()};
  Tensor indices = empty(out_shape, DType::Int64, kNhwc);
  Tensor out = empty(out_shape, input.dtype(), kNhwc);
  detail::dispatch_floating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::max_pool_nhwc(input.data<T>(kNhwc), nhwc_planes(input.shape(), out_shape), windows, out.data<T>(kNhwc),
                           indices.data<std::int64_t>(kNhwc));
  });
  annotate_max_pool(out, kernel, stride, padding, dilation, ceil_mode);
  out = record_if_needed("max_pool2d", out, {input}, [&] {
    return [indices = SavedTensor(indices, "max_pool2d"), shape = input.shape()](const Tensor& grad, NeedsGrad) {
      return std::vector<Tensor>{scatter_nhwc(grad, indices, shape)};
    };
  });
  return {out, want_indices ? indices : Tensor()};
}

}  // namespace tapegrad
