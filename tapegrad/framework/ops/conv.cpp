// Convolution ops: shape checks, the output allocation and the tape records. The computing is in
// framework/kernels/conv2d (oneDNN's convolution primitives or im2col + GEMM, chosen per shape there).
// Channels-last: a convolution whose input or weight suggests channels-last runs on NHWC buffers and returns its
// output and its input gradient channels-last (PyTorch 1.13's rule, checked with torch on mixed and size-1
// cases); the weight and its gradient keep the weight's own format (the kernels read a row-major copy).
#include <tapegrad/framework/ops/conv.h>

#include <tuple>
#include <utility>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/memory_format.h>
#include <tapegrad/framework/kernels/conv2d.h>
#include <tapegrad/framework/ops/detail/autocast.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

std::string IntPair::str() const { return fmt::format("({}, {})", h, w); }

std::int64_t conv_output_size(std::int64_t input, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                              std::int64_t dilation) {
  const std::int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1;
  // Note: C++ division truncates toward zero; a negative span means "no output", not output 1.
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

struct ConvParams {
  IntPair stride, padding, dilation;
  std::int64_t groups;
};

constexpr MemoryFormat kChannelsLast = MemoryFormat::ChannelsLast;

// The format a convolution runs in, given its two activation-or-weight operands: PyTorch's
// mkldnn_conv_use_channels_last / thnn_conv_use_channels_last (either suggests channels-last). A tensor that is
// both row-major and channels-last (C == 1, or 1x1 spatial) suggests row-major, so alone it keeps the old path.
MemoryFormat conv_format(const Tensor& a, const Tensor& b) {
  return a.suggest_memory_format() == kChannelsLast || b.suggest_memory_format() == kChannelsLast
             ? kChannelsLast
             : MemoryFormat::Contiguous;
}

using Geometry = kernels::ConvGeometry;

Geometry make_geometry(const char* op, const Shape& input, const Shape& weight, const ConvParams& p) {
  if (p.stride.h < 1 || p.stride.w < 1) fail("{}: stride must be positive, got {}", op, p.stride.str());
  if (p.dilation.h < 1 || p.dilation.w < 1) fail("{}: dilation must be positive, got {}", op, p.dilation.str());
  if (p.padding.h < 0 || p.padding.w < 0) fail("{}: padding must be non-negative, got {}", op, p.padding.str());
  if (p.groups < 1) fail("{}: groups must be positive, got {}", op, p.groups);
  if (input.size() != 4) fail("{}: expected a 4-d input [N, C, H, W], got {}", op, shape_string(input));
  if (weight.size() != 4) fail("{}: expected a 4-d weight [O, C/groups, kh, kw], got {}", op, shape_string(weight));
  for (std::int64_t extent : weight)
    if (extent < 1) fail("{}: weight {} has an empty dim", op, shape_string(weight));
  Geometry g{input[0],     input[1],     input[2],      input[3],      weight[0],      weight[2],
             weight[3],    0,            0,             p.stride.h,    p.stride.w,     p.padding.h,
             p.padding.w,  p.dilation.h, p.dilation.w,  p.groups};
  if (g.o % p.groups != 0)
    fail("{}: weight {} has {} output channels, not divisible by groups={}", op, shape_string(weight), g.o, p.groups);
  if (weight[1] * p.groups != g.c)
    fail("{}: weight {} expects {} input channels (groups={}), but input {} has {}", op, shape_string(weight),
         weight[1] * p.groups, p.groups, shape_string(input), g.c);
  g.oh = conv_output_size(g.h, g.kh, p.stride.h, p.padding.h, p.dilation.h);
  g.ow = conv_output_size(g.w, g.kw, p.stride.w, p.padding.w, p.dilation.w);
  if (g.oh < 1 || g.ow < 1)
    fail("{}: input {} padded to {} x {} is smaller than the dilated kernel {} x {}", op, shape_string(input),
         g.h + 2 * p.padding.h, g.w + 2 * p.padding.w, p.dilation.h * (g.kh - 1) + 1, p.dilation.w * (g.kw - 1) + 1);
  return g;
}

void check_floating_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  a.check_defined(op);
  b.check_defined(op);
  if (!is_floating(a.dtype()) || a.dtype() != b.dtype())
    fail("{}: {} is {} and {} is {}; expected the same float dtype", op, a_name, dtype_name(a.dtype()), b_name,
         dtype_name(b.dtype()));
}

void check_grad_output(const char* op, const Tensor& grad_output, const Geometry& g) {
  const Shape expected{g.n, g.o, g.oh, g.ow};
  if (grad_output.shape() != expected)
    fail("{}: grad_output {} does not match the convolution's output shape {}", op, shape_string(grad_output.shape()),
         shape_string(expected));
}

struct RawGrads {
  Tensor input, weight, bias;
};

// The weight gradient, and the input and bias gradients when asked, in one kernel call (oneDNN sums the bias
// gradient while it reads grad_output for the weight's, and reorders grad_output once for the input's and the
// weight's); not recorded, so only for a backward that does not build a graph.
// `input` is in `format` (the forward's), `weight` row-major; grad_output is brought to `format`.
RawGrads raw_grads(const Tensor& input, const Tensor& grad_output_in, const Tensor& weight, const ConvParams& p,
                   MemoryFormat format, bool want_input, bool want_bias) {
  const Tensor grad_output = grad_output_in.contiguous(format);
  Geometry g = make_geometry("conv2d", input.shape(), weight.shape(), p);
  g.channels_last = format == kChannelsLast;
  RawGrads out{want_input ? empty(input.shape(), input.dtype(), format) : Tensor(),
               empty(weight.shape(), input.dtype()), want_bias ? empty({g.o}, input.dtype()) : Tensor()};
  detail::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    T* db = want_bias ? out.bias.data<T>() : nullptr;
    if (want_input)
      kernels::conv2d_backward(input.data<T>(format), grad_output.data<T>(format), weight.data<T>(),
                               out.input.data<T>(format), out.weight.data<T>(), db, g);
    else
      kernels::conv2d_weight_grad(input.data<T>(format), grad_output.data<T>(format), out.weight.data<T>(), db, g);
  });
  return out;
}

Tensor conv2d_batched(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, const ConvParams& p) {
  const MemoryFormat format = conv_format(input_in, weight_in);
  const Tensor input = input_in.contiguous(format), weight = weight_in.contiguous(), bias = bias_in.contiguous();
  Geometry g = make_geometry("conv2d", input.shape(), weight.shape(), p);
  g.channels_last = format == kChannelsLast;
  if (bias.defined()) {
    check_floating_pair("conv2d", input, "input", bias, "bias");
    if (bias.shape() != Shape{g.o})
      fail("conv2d: bias {} must be [{}], one value per output channel", shape_string(bias.shape()), g.o);
  }
  if (detail::autocast_applies({input, weight, bias}))  // bfloat16 (ops/conv_autocast.cpp), in `format` too
    return detail::autocast_conv2d(input, weight, bias, g);
  Tensor out = empty({g.n, g.o, g.oh, g.ow}, input.dtype(), format);
  detail::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    kernels::conv2d_forward(input.data<T>(format), weight.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                            out.data<T>(format), g);
  });
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (trace::active())
    trace::annotate(out, {{"stride", std::vector<std::int64_t>{p.stride.h, p.stride.w}},
                          {"padding", std::vector<std::int64_t>{p.padding.h, p.padding.w}},
                          {"dilation", std::vector<std::int64_t>{p.dilation.h, p.dilation.w}},
                          {"groups", p.groups}});
  return record_if_needed("conv2d", out, inputs, [&] {
    return [sx = SavedTensor(input, "conv2d"), sw = SavedTensor(weight, "conv2d"), has_bias = bias.defined(), p,
            format](const Tensor& grad_in, NeedsGrad needs) {
      std::vector<Tensor> grads(has_bias ? 3 : 2);
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      // Note: the gradients take the forward's format whatever grad_output's (PyTorch's input gradient does).
      const Tensor grad = grad_in.contiguous(format);
      // Note: the fused kernel call is not differentiable; under create_graph the recorded ops are used.
      const bool want_bias = has_bias && needs[2];
      if (!is_grad_enabled() && needs[1] && (needs[0] || want_bias)) {
        RawGrads raw = raw_grads(x, grad, w, p, format, needs[0], want_bias);
        grads[0] = std::move(raw.input);
        grads[1] = std::move(raw.weight);
        if (want_bias) grads[2] = std::move(raw.bias);
        return grads;
      }
      // Note: .contiguous(format) keeps the forward's format where grad and w are both formats at once (O == 1).
      if (needs[0])
        grads[0] = conv2d_input_grad(grad, w, x.shape(), p.stride, p.padding, p.dilation, p.groups).contiguous(format);
      if (needs[1]) grads[1] = conv2d_weight_grad(x, grad, w.shape(), p.stride, p.padding, p.dilation, p.groups);
      if (has_bias && needs[2]) grads[2] = sum(grad, {0, 2, 3});
      return grads;
    };
  });
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntPair stride, IntPair padding,
              IntPair dilation, std::int64_t groups) {
  check_floating_pair("conv2d", input, "input", weight, "weight");
  const ConvParams p{stride, padding, dilation, groups};
  if (input.dim() == 3) {
    // Unbatched [C, H, W]: a batch of one, as PyTorch does.
    Shape batched{1};
    batched.insert(batched.end(), input.shape().begin(), input.shape().end());
    Tensor out = conv2d_batched(input.reshape(batched), weight, bias, p);
    return out.reshape(Shape(out.shape().begin() + 1, out.shape().end()));
  }
  if (input.dim() != 4)
    fail("conv2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got {}", shape_string(input.shape()));
  return conv2d_batched(input, weight, bias, p);
}

Tensor conv2d_input_grad(const Tensor& grad_output_in, const Tensor& weight_in, const Shape& input_shape, IntPair stride,
                         IntPair padding, IntPair dilation, std::int64_t groups) {
  check_floating_pair("conv2d_input_grad", grad_output_in, "grad_output", weight_in, "weight");
  const MemoryFormat format = conv_format(grad_output_in, weight_in);
  const Tensor grad_output = grad_output_in.contiguous(format), weight = weight_in.contiguous();
  const ConvParams p{stride, padding, dilation, groups};
  Geometry g = make_geometry("conv2d_input_grad", input_shape, weight.shape(), p);
  g.channels_last = format == kChannelsLast;
  check_grad_output("conv2d_input_grad", grad_output, g);
  Tensor out = empty(input_shape, weight.dtype(), format);
  detail::dispatch_floating(weight.dtype(), "conv2d_input_grad", [&](auto tag) {
    using T = decltype(tag);
    kernels::conv2d_input_grad(grad_output.data<T>(format), weight.data<T>(), out.data<T>(format), g);
  });
  return record_if_needed("conv2d_input_grad", out, {grad_output, weight}, [&] {
    return [sg = SavedTensor(grad_output, "conv2d_input_grad"), sw = SavedTensor(weight, "conv2d_input_grad"), p](
               const Tensor& grad, NeedsGrad needs) {
      // <grad, input_grad(g, w)> = <conv2d(grad, w), g>: differentiate that bilinear form.
      return std::vector<Tensor>{
          needs[0] ? conv2d(grad, sw.get(), Tensor(), p.stride, p.padding, p.dilation, p.groups) : Tensor(),
          needs[1] ? conv2d_weight_grad(grad, sg.get(), sw.get().shape(), p.stride, p.padding, p.dilation, p.groups)
                   : Tensor()};
    };
  });
}

Tensor conv2d_weight_grad(const Tensor& input_in, const Tensor& grad_output_in, const Shape& weight_shape, IntPair stride,
                          IntPair padding, IntPair dilation, std::int64_t groups) {
  check_floating_pair("conv2d_weight_grad", input_in, "input", grad_output_in, "grad_output");
  const MemoryFormat format = conv_format(input_in, grad_output_in);
  const Tensor input = input_in.contiguous(format), grad_output = grad_output_in.contiguous(format);
  const ConvParams p{stride, padding, dilation, groups};
  Geometry g = make_geometry("conv2d_weight_grad", input.shape(), weight_shape, p);
  g.channels_last = format == kChannelsLast;
  check_grad_output("conv2d_weight_grad", grad_output, g);
  Tensor out = empty(weight_shape, input.dtype());
  detail::dispatch_floating(input.dtype(), "conv2d_weight_grad", [&](auto tag) {
    using T = decltype(tag);
    kernels::conv2d_weight_grad(input.data<T>(format), grad_output.data<T>(format), out.data<T>(), nullptr, g);
  });
  return record_if_needed("conv2d_weight_grad", out, {input, grad_output}, [&] {
    return [sx = SavedTensor(input, "conv2d_weight_grad"), sg = SavedTensor(grad_output, "conv2d_weight_grad"), p](
               const Tensor& grad, NeedsGrad needs) {
      // <grad, weight_grad(x, g)> = <conv2d(x, grad), g>.
      return std::vector<Tensor>{
          needs[0] ? conv2d_input_grad(sg.get(), grad, sx.get().shape(), p.stride, p.padding, p.dilation, p.groups)
                   : Tensor(),
          needs[1] ? conv2d(sx.get(), grad, Tensor(), p.stride, p.padding, p.dilation, p.groups) : Tensor()};
    };
  });
}

}  // namespace tapegrad
