#pragma once
// Internal: autocast's 2-d convolution, NCHW or NHWC (channels-last) activations: bfloat16 activations, weights and
// output gradients (raw bits, already rounded by the caller), float32 outputs, bias and gradients.
#include <cstddef>
#include <cstdint>

#include <tapegrad/framework/kernels/conv2d.h>

namespace tapegrad::kernels {

/// The contracts of conv2d_forward / conv2d_input_grad / conv2d_weight_grad / conv2d_backward (kernels/conv2d.h)
/// with bfloat16 x, w and grad_output. On oneDNN's bfloat16 convolution primitives (float32 accumulation) where
/// the CPU has them, else the operands widened back to float32 (exact) and run on the float32 kernels (see
/// kernels/autocast_path.h). The activation buffers are NHWC when geometry.channels_last, as for the float32 ones.
void conv2d_bf16_forward(const std::uint16_t* x, const std::uint16_t* w, const float* bias, float* out,
                         const ConvGeometry& g);
void conv2d_bf16_input_grad(const std::uint16_t* grad_output, const std::uint16_t* w, float* dx,
                            const ConvGeometry& g);
void conv2d_bf16_weight_grad(const std::uint16_t* x, const std::uint16_t* grad_output, float* dw, float* db,
                             const ConvGeometry& g);
void conv2d_bf16_backward(const std::uint16_t* x, const std::uint16_t* grad_output, const std::uint16_t* w,
                          float* dx, float* dw, float* db, const ConvGeometry& g);

/// The bfloat16 primitive cache's current number of entries and its bound.
std::size_t conv2d_bf16_cache_size();
std::size_t conv2d_bf16_cache_capacity();

}  // namespace tapegrad::kernels
