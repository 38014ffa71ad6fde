// The float32 convolution on oneDNN's convolution primitives (forward, backward-data, backward-weights), which
// pick their AVX2 / AVX-512 / AMX code from the CPU at run time; the primitives, their cache and the layouts
// (blocked for NCHW tensors, NHWC as given for channels-last ones) are kernels/detail/onednn_conv.h's, shared with
// autocast's bfloat16 convolution.
//
// Note: measured (bench/conv_layers), the direct blocked kernels with the reorders still beat both im2col + GEMM
// and oneDNN's own plain-layout (im2col) convolution on most layers; kernels/conv2d.cpp holds the rule for the rest.
#include <tapegrad/framework/kernels/conv2d_onednn.h>

#include <algorithm>

#include <tapegrad/framework/kernels/detail/onednn_conv.h>

namespace tapegrad::kernels::onednn {

namespace {

using conv::guarded;
using conv::Precision;
using conv::ReorderedInputs;

bool run(ConvDirection direction, const ConvGeometry& g, bool bias, const conv::Pointers& pointers,
         ReorderedInputs* reordered = nullptr) {
  return conv::run(Precision::f32, direction, g, bias, pointers, reordered);
}

}  // namespace

void forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g) {
  if (g.n == 0) return;  // an empty batch has nothing to compute (and oneDNN rejects some zero extents)
  guarded("conv2d", g, [&] {
    run(ConvDirection::forward, g, bias != nullptr,
        {{DNNL_ARG_SRC, const_cast<float*>(x)},
         {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
         {DNNL_ARG_BIAS, const_cast<float*>(bias)},
         {DNNL_ARG_DST, out}});
  });
}

void input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g) {
  if (g.n == 0) return;
  guarded("conv2d_input_grad", g, [&] {
    run(ConvDirection::input_grad, g, false, {{DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)},
                                              {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
                                              {DNNL_ARG_DIFF_SRC, dx}});
  });
}

namespace {

void weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g,
                 ReorderedInputs* reordered) {
  if (g.n == 0) {  // an empty sum
    std::fill(dw, dw + g.o * g.cg() * g.kh * g.kw, 0.0f);
    if (db) std::fill(db, db + g.o, 0.0f);
    return;
  }
  guarded("conv2d_weight_grad", g, [&] {
    run(ConvDirection::weight_grad, g, db != nullptr,
        {{DNNL_ARG_SRC, const_cast<float*>(x)},
         {DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)},
         {DNNL_ARG_DIFF_WEIGHTS, dw},
         {DNNL_ARG_DIFF_BIAS, db}},
        reordered);
  });
}

}  // namespace

void weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g) {
  weight_grad(x, grad_output, dw, db, g, nullptr);
}

void backward(const float* x, const float* grad_output, const float* w, float* dx, float* dw, float* db,
              const ConvGeometry& g) {
  if (g.n == 0) return weight_grad(x, grad_output, dw, db, g, nullptr);
  // Note: grad_output is reordered into the blocked layout once for both primitives (when they want the same
  // layout): that reorder was 1.9% of a 1-thread cnn training step per convolution.
  ReorderedInputs reordered;
  guarded("conv2d_input_grad", g, [&] {
    run(ConvDirection::input_grad, g, false,
        {{DNNL_ARG_DIFF_DST, const_cast<float*>(grad_output)}, {DNNL_ARG_WEIGHTS, const_cast<float*>(w)},
         {DNNL_ARG_DIFF_SRC, dx}},
        &reordered);
  });
  weight_grad(x, grad_output, dw, db, g, &reordered);
}

std::size_t cache_size() { return conv::cache_size(Precision::f32); }
std::size_t cache_capacity() { return conv::cache_capacity(Precision::f32); }

}  // namespace tapegrad::kernels::onednn
