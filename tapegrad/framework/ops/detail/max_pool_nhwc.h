#pragma once
// Internal: max pooling of a channels-last input (ops/max_pool_nhwc.cpp), called by max_pool2d when its input is
// channels-last.
#include <cstdint>
#include <utility>

#include <tapegrad/framework/ops/conv.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// max_pool2d of a 4-d channels-last `input`: a channels-last output (and, when `want_indices`, int64 indices in
/// the input plane, as PyTorch's, channels-last too); differentiable in every order, as the NCHW op.
std::pair<Tensor, Tensor> max_pool_nhwc(const Tensor& input, IntPair kernel, IntPair stride, IntPair padding,
                                        IntPair dilation, bool ceil_mode, bool want_indices);

/// Reports max_pool2d's attributes to an active tracer (ONNX export); both layouts' forwards call it.
void annotate_max_pool(const Tensor& out, IntPair kernel, IntPair stride, IntPair padding, IntPair dilation,
                       bool ceil_mode);

}  // namespace tapegrad::detail
