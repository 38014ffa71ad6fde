// Max pooling of channels-last tensors: the NHWC kernels (kernels/pool_nhwc.h) and their records. The argmax is
// saved as int64 indices in the input plane (PyTorch's indices), one per output element in NHWC order; the
// gradient is their scatter and the scatter's gradient the matching gather, as in max_pool.cpp, so every order of
// derivative stays channels-last.
#include <tapegrad/framework/ops/detail/max_pool_nhwc.h>

#include <cstdint>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/kernels/pool_nhwc.h>
#include <tapegrad/framework/ops/detail/pool_shape.h>

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
