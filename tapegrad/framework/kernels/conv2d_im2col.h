#pragma once
// Internal: the convolution as im2col + kernels::gemm, for both dtypes (the only float64 path).
#include <tapegrad/framework/kernels/conv2d.h>

namespace tapegrad::kernels::im2col {

/// The same contracts as kernels::conv2d_forward, conv2d_input_grad and conv2d_weight_grad.
template <class T>
void forward(const T* x, const T* w, const T* bias, T* out, const ConvGeometry& g);
template <class T>
void input_grad(const T* grad_output, const T* w, T* dx, const ConvGeometry& g);
template <class T>
void weight_grad(const T* x, const T* grad_output, T* dw, T* db, const ConvGeometry& g);

}  // namespace tapegrad::kernels::im2col
