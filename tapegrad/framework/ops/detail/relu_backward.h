#pragma once
// Internal: ReLU's backward rule, shared by relu and by the fused BatchNorm+ReLU op.
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// g where `values` > 0 or is NaN, 0 where `values` <= 0 (PyTorch's threshold_backward: an infinite g gives 0
/// there, not the NaN of g * 0). `values` may be ReLU's input or its output: both give the same mask. A fused pass
/// without create_graph; recorded, differentiable ops with it.
Tensor relu_backward(const Tensor& g, const Tensor& values);

}  // namespace tapegrad::detail
