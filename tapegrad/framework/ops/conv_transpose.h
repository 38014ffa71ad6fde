#pragma once
/// 2-d transposed convolution (NCHW), the adjoint of conv2d: PyTorch's conv_transpose2d.
#include <tapegrad/export.h>
#include <cstdint>

#include <tapegrad/framework/ops/conv.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Transposed convolution of `input` [N, C_in, H, W] (or unbatched [C_in, H, W]) with `weight`
/// [C_in, C_out/groups, kh, kw], plus `bias` [C_out] when defined. Output [N, C_out, OH, OW] with
/// OH = (H - 1)*stride - 2*padding + dilation*(kh - 1) + output_padding + 1 (the same for W).
/// output_padding must be smaller than stride (it picks one of the input sizes a strided conv2d maps to H;
/// PyTorch also allows output_padding < dilation, tapegrad does not). conv_transpose2d(x, w) is the gradient of conv2d w.r.t. its input, so the forward runs
/// conv2d's input-gradient kernel and the backward runs conv2d (for the input) and its weight gradient
/// (for the weight); differentiable to any order.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntPair stride = 1,
                        IntPair padding = 0, IntPair output_padding = 0, std::int64_t groups = 1,
                        IntPair dilation = 1);

/// The output extent of a transposed convolution along one dim (PyTorch's formula).
std::int64_t conv_transpose_output_size(std::int64_t input, std::int64_t kernel, std::int64_t stride,
                                        std::int64_t padding, std::int64_t output_padding, std::int64_t dilation);

}  // namespace tapegrad

TAPEGRAD_API_END
