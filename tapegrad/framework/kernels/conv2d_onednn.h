#pragma once
// Internal: the float32 convolution as oneDNN primitives, created once per shape and kept in a bounded cache.
#include <cstddef>

#include <tapegrad/framework/kernels/conv2d.h>

namespace tapegrad::kernels::onednn {

/// The same contracts as kernels::conv2d_forward, conv2d_input_grad and conv2d_weight_grad, float32 only.
void forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g);
void input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g);
void weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g);
/// input_grad and weight_grad in one call, which reorders grad_output for both primitives once.
void backward(const float* x, const float* grad_output, const float* w, float* dx, float* dw, float* db,
              const ConvGeometry& g);

/// The cache's current number of entries and its bound.
std::size_t cache_size();
std::size_t cache_capacity();

}  // namespace tapegrad::kernels::onednn
