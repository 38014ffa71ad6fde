#pragma once
/// 2-d convolution (cross-correlation, NCHW) and the two ops that make up its gradient.
/// Note: conv2d is bilinear in (input, weight), so its gradient w.r.t. the input is conv2d_input_grad and
/// w.r.t. the weight conv2d_weight_grad; each of those is again bilinear and differentiates into the other
/// two. The three ops are closed under differentiation, which is what makes double backward work.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// A (height, width) pair of integers; a single integer means the same value for both.
struct IntPair {
  std::int64_t h = 0;
  std::int64_t w = 0;
  IntPair(std::int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose, `padding = 1`
  IntPair(std::int64_t height, std::int64_t width) : h(height), w(width) {}
  bool operator==(const IntPair&) const = default;
  /// "(h, w)" as PyTorch prints a tuple.
  std::string str() const;
};

/// Cross-correlation of `input` [N, C, H, W] (or unbatched [C, H, W]) with `weight` [O, C/groups, kh, kw],
/// plus `bias` [O] when defined. Output [N, O, OH, OW] with OH = (H + 2*pad - dil*(kh-1) - 1) / stride + 1.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntPair stride = 1,
              IntPair padding = 0, IntPair dilation = 1, std::int64_t groups = 1);

/// The gradient of conv2d w.r.t. its input [N, C, H, W] of shape `input_shape`, given the output gradient
/// `grad_output` [N, O, OH, OW] (a transposed convolution). Differentiable in grad_output and weight.
Tensor conv2d_input_grad(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape, IntPair stride = 1,
                         IntPair padding = 0, IntPair dilation = 1, std::int64_t groups = 1);

/// The gradient of conv2d w.r.t. its weight of shape `weight_shape`, given the input and the output
/// gradient. Differentiable in input and grad_output.
Tensor conv2d_weight_grad(const Tensor& input, const Tensor& grad_output, const Shape& weight_shape, IntPair stride = 1,
                          IntPair padding = 0, IntPair dilation = 1, std::int64_t groups = 1);

/// The output extent of a convolution or pooling window along one dim (PyTorch's formula, floor mode).
std::int64_t conv_output_size(std::int64_t input, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                              std::int64_t dilation);

}  // namespace tapegrad

TAPEGRAD_API_END
