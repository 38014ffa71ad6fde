// Transposed convolution. The forward is conv2d's input gradient (a col2im scatter of weight^T * input), run
// without recording; the record is this op's own, and its backward is the other two members of conv2d's family:
// conv2d itself for the input and conv2d's weight gradient for the weight. All three are recorded ops, so the
// gradient is itself differentiable.
#include <tapegrad/framework/ops/conv_transpose.h>

#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

std::int64_t conv_transpose_output_size(std::int64_t input, std::int64_t kernel, std::int64_t stride,
                                        std::int64_t padding, std::int64_t output_padding, std::int64_t dilation) {
  return (input - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

namespace {

constexpr const char* kOp = "conv_transpose2d";

struct TransposeParams {
  IntPair stride, padding, output_padding, dilation;
  std::int64_t groups;
};

// Checks everything conv2d's gradient kernels would otherwise reject in their own words, and returns the
// output shape [N, C_out, OH, OW].
Shape check_and_output_shape(const Tensor& input, const Tensor& weight, const Tensor& bias, const TransposeParams& p) {
  const Shape& in = input.shape();
  const Shape& w = weight.shape();
  if (!is_floating(input.dtype()) || input.dtype() != weight.dtype())
    fail("{}: input is {} and weight is {}; expected the same float dtype", kOp, dtype_name(input.dtype()),
         dtype_name(weight.dtype()));
  if (p.stride.h < 1 || p.stride.w < 1) fail("{}: stride must be positive, got {}", kOp, p.stride.str());
  if (p.dilation.h < 1 || p.dilation.w < 1) fail("{}: dilation must be positive, got {}", kOp, p.dilation.str());
  if (p.padding.h < 0 || p.padding.w < 0) fail("{}: padding must be non-negative, got {}", kOp, p.padding.str());
  if (p.groups < 1) fail("{}: groups must be positive, got {}", kOp, p.groups);
  // Note: PyTorch also accepts stride <= output_padding < dilation; such an output is not the exact input shape
  // of any conv2d with these options, which conv2d's gradient kernels need, so tapegrad rejects it.
  if (p.output_padding.h < 0 || p.output_padding.w < 0 || p.output_padding.h >= p.stride.h ||
      p.output_padding.w >= p.stride.w)
    fail("{}: output_padding {} must be non-negative and smaller than stride {}", kOp, p.output_padding.str(),
         p.stride.str());
  if (in.size() != 4) fail("{}: expected a 4-d input [N, C_in, H, W], got {}", kOp, shape_string(in));
  if (w.size() != 4) fail("{}: expected a 4-d weight [C_in, C_out/groups, kh, kw], got {}", kOp, shape_string(w));
  for (std::int64_t extent : w)
    if (extent < 1) fail("{}: weight {} has an empty dim", kOp, shape_string(w));
  if (w[0] != in[1])
    fail("{}: weight {} expects {} input channels, but input {} has {}", kOp, shape_string(w), w[0], shape_string(in),
         in[1]);
  if (w[0] % p.groups != 0)
    fail("{}: weight {} has {} input channels, not divisible by groups={}", kOp, shape_string(w), w[0], p.groups);
  const std::int64_t out_channels = w[1] * p.groups;
  const std::int64_t oh = conv_transpose_output_size(in[2], w[2], p.stride.h, p.padding.h, p.output_padding.h,
                                                     p.dilation.h);
  const std::int64_t ow = conv_transpose_output_size(in[3], w[3], p.stride.w, p.padding.w, p.output_padding.w,
                                                     p.dilation.w);
  if (in[2] < 1 || in[3] < 1 || oh < 1 || ow < 1)
    fail("{}: input {} with weight {}, stride {} and padding {} gives an empty output {} x {}", kOp, shape_string(in),
         shape_string(w), p.stride.str(), p.padding.str(), oh, ow);
  if (bias.defined()) {
    if (bias.dtype() != input.dtype())
      fail("{}: bias is {} but input is {}", kOp, dtype_name(bias.dtype()), dtype_name(input.dtype()));
    if (bias.shape() != Shape{out_channels})
      fail("{}: bias {} must be [{}], one value per output channel", kOp, shape_string(bias.shape()), out_channels);
  }
  return {in[0], out_channels, oh, ow};
}

// Note: row-major in and out, as PyTorch 1.13's CPU conv_transpose2d (its output and gradients are row-major for
// channels-last inputs and weights, float32 and float64, checked with torch): channels-last operands are copied.
Tensor conv_transpose2d_batched(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias,
                                const TransposeParams& p) {
  const Tensor input = input_in.contiguous(), weight = weight_in.contiguous();
  const Shape out_shape = check_and_output_shape(input, weight, bias, p);
  Tensor out;
  {
    // The adjoint of conv2d: conv2d maps [N, C_out, OH, OW] to [N, C_in, H, W] with this very weight.
    NoGradGuard no_grad;
    out = conv2d_input_grad(input.detach(), weight.detach(), out_shape, p.stride, p.padding, p.dilation, p.groups);
    if (bias.defined()) out = add(out, bias.detach().reshape({1, out_shape[1], 1, 1}));
  }
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (trace::active())
    trace::annotate(out, {{"stride", std::vector<std::int64_t>{p.stride.h, p.stride.w}},
                          {"padding", std::vector<std::int64_t>{p.padding.h, p.padding.w}},
                          {"output_padding", std::vector<std::int64_t>{p.output_padding.h, p.output_padding.w}},
                          {"dilation", std::vector<std::int64_t>{p.dilation.h, p.dilation.w}},
                          {"groups", p.groups}});
  return record_if_needed(kOp, out, inputs, [&] {
    return [sx = SavedTensor(input, kOp), sw = SavedTensor(weight, kOp), has_bias = bias.defined(), p](
               const Tensor& grad_in, NeedsGrad needs) {
      std::vector<Tensor> grads(has_bias ? 3 : 2);
      const Tensor grad = grad_in.contiguous();  // row-major gradients, as the forward
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      // <grad, input_grad(x, w)> = <conv2d(grad, w), x>: the same bilinear form conv2d_input_grad differentiates.
      if (needs[0]) grads[0] = conv2d(grad, w, Tensor(), p.stride, p.padding, p.dilation, p.groups);
      if (needs[1]) grads[1] = conv2d_weight_grad(grad, x, w.shape(), p.stride, p.padding, p.dilation, p.groups);
      if (has_bias && needs[2]) grads[2] = sum(grad, {0, 2, 3});
      return grads;
    };
  });
}

}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntPair stride,
                        IntPair padding, IntPair output_padding, std::int64_t groups, IntPair dilation) {
  input.check_defined(kOp);
  weight.check_defined(kOp);
  const TransposeParams p{stride, padding, output_padding, dilation, groups};
  if (input.dim() == 3) {
    // Unbatched [C_in, H, W]: a batch of one, as PyTorch does.
    Shape batched{1};
    batched.insert(batched.end(), input.shape().begin(), input.shape().end());
    Tensor out = conv_transpose2d_batched(input.reshape(batched), weight, bias, p);
    return out.reshape(Shape(out.shape().begin() + 1, out.shape().end()));
  }
  if (input.dim() != 4)
    fail("{}: expected a 3-d [C_in, H, W] or 4-d [N, C_in, H, W] input, got {}", kOp, shape_string(input.shape()));
  return conv_transpose2d_batched(input, weight, bias, p);
}

}  // namespace tapegrad
