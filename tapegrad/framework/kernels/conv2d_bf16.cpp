// Autocast's convolution: oneDNN's bfloat16 convolution primitives (bfloat16 src, weights and diff_dst; float32
// dst, bias, diff_src, diff_weights and diff_bias, accumulated in float32), or the float32 fallback.
//
// Note: the primitives, their cache and the layouts are kernels/detail/onednn_conv.h's, shared with the float32
// convolution: NCHW activations are reordered into oneDNN's blocked layouts and back, channels-last ones are read
// and written in place by oneDNN's NHWC kernels.
#include <tapegrad/framework/kernels/conv2d_bf16.h>

#include <algorithm>
#include <vector>

#include <tapegrad/framework/kernels/autocast_path.h>
#include <tapegrad/framework/kernels/detail/onednn_conv.h>

namespace tapegrad::kernels {

namespace {

using onednn::conv::guarded;
using onednn::conv::Precision;
using onednn::conv::ReorderedInputs;

// Runs the bfloat16 primitive; false (nothing computed) where there is none or the fallback is forced.
bool run(ConvDirection direction, const ConvGeometry& g, bool bias, const onednn::conv::Pointers& pointers,
         ReorderedInputs& reordered) {
  if (autocast::fallback_forced()) return false;
  return onednn::conv::run(Precision::bf16, direction, g, bias, pointers, &reordered);
}

// A bfloat16 operand widened to float32 for the fallback (same layout).
std::vector<float> widened(const std::uint16_t* x, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  autocast::widen_bf16(x, out.data(), n);
  return out;
}

std::int64_t input_numel(const ConvGeometry& g) { return g.n * g.c * g.h * g.w; }
std::int64_t output_numel(const ConvGeometry& g) { return g.n * g.o * g.oh * g.ow; }
std::int64_t weight_numel(const ConvGeometry& g) { return g.o * g.cg() * g.kh * g.kw; }

void* mutable_pointer(const void* p) { return const_cast<void*>(p); }

}  // namespace

void conv2d_bf16_forward(const std::uint16_t* x, const std::uint16_t* w, const float* bias, float* out,
                         const ConvGeometry& g) {
  if (g.n == 0) return;
  ReorderedInputs reordered;
  bool done = false;
  guarded("conv2d", g, [&] {
    done = run(ConvDirection::forward, g, bias != nullptr,
               {{DNNL_ARG_SRC, mutable_pointer(x)}, {DNNL_ARG_WEIGHTS, mutable_pointer(w)},
                {DNNL_ARG_BIAS, mutable_pointer(bias)}, {DNNL_ARG_DST, out}},
               reordered);
  });
  if (!done) conv2d_forward(widened(x, input_numel(g)).data(), widened(w, weight_numel(g)).data(), bias, out, g);
}

namespace {

void input_grad(const std::uint16_t* grad_output, const std::uint16_t* w, float* dx, const ConvGeometry& g,
                ReorderedInputs& reordered) {
  bool done = false;
  guarded("conv2d_input_grad", g, [&] {
    done = run(ConvDirection::input_grad, g, false,
               {{DNNL_ARG_DIFF_DST, mutable_pointer(grad_output)}, {DNNL_ARG_WEIGHTS, mutable_pointer(w)},
                {DNNL_ARG_DIFF_SRC, dx}},
               reordered);
  });
  if (!done)
    conv2d_input_grad(widened(grad_output, output_numel(g)).data(), widened(w, weight_numel(g)).data(), dx, g);
}

void weight_grad(const std::uint16_t* x, const std::uint16_t* grad_output, float* dw, float* db, const ConvGeometry& g,
                 ReorderedInputs& reordered) {
  if (g.n == 0) {  // an empty sum
    std::fill(dw, dw + weight_numel(g), 0.0f);
    if (db) std::fill(db, db + g.o, 0.0f);
    return;
  }
  bool done = false;
  guarded("conv2d_weight_grad", g, [&] {
    done = run(ConvDirection::weight_grad, g, db != nullptr,
               {{DNNL_ARG_SRC, mutable_pointer(x)}, {DNNL_ARG_DIFF_DST, mutable_pointer(grad_output)},
                {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}},
               reordered);
  });
  if (!done)
    conv2d_weight_grad(widened(x, input_numel(g)).data(), widened(grad_output, output_numel(g)).data(), dw, db, g);
}

}  // namespace

void conv2d_bf16_input_grad(const std::uint16_t* grad_output, const std::uint16_t* w, float* dx,
                            const ConvGeometry& g) {
  if (g.n == 0) return;
  ReorderedInputs reordered;
  input_grad(grad_output, w, dx, g, reordered);
}

void conv2d_bf16_weight_grad(const std::uint16_t* x, const std::uint16_t* grad_output, float* dw, float* db,
                             const ConvGeometry& g) {
  ReorderedInputs reordered;
  weight_grad(x, grad_output, dw, db, g, reordered);
}

void conv2d_bf16_backward(const std::uint16_t* x, const std::uint16_t* grad_output, const std::uint16_t* w,
                          float* dx, float* dw, float* db, const ConvGeometry& g) {
  ReorderedInputs reordered;
  if (g.n == 0) return weight_grad(x, grad_output, dw, db, g, reordered);
  // Note: grad_output is reordered into the blocked layout once for both primitives when they want the same one.
  input_grad(grad_output, w, dx, g, reordered);
  weight_grad(x, grad_output, dw, db, g, reordered);
}

std::size_t conv2d_bf16_cache_size() { return onednn::conv::cache_size(Precision::bf16); }
std::size_t conv2d_bf16_cache_capacity() { return onednn::conv::cache_capacity(Precision::bf16); }

}  // namespace tapegrad::kernels
