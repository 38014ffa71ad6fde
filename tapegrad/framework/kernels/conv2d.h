#pragma once
// Internal (not installed): the kernels layer's 2-d convolution, NCHW or NHWC (channels-last) activations in and
// out. ops/conv.cpp checks shapes and records the tape; this computes, and nothing above it knows which library
// does.
#include <cstddef>
#include <cstdint>

namespace tapegrad::kernels {

/// Every extent of one convolution, already checked by the op: input [n, c, h, w], weight [o, c/groups, kh, kw],
/// output [n, o, oh, ow]. With `channels_last`, the activation buffers (input, output, grad_output and the input
/// gradient) hold those tensors in NHWC order ([n, h, w, c] row-major); the weight and its gradient are always
/// [o, c/groups, kh, kw] row-major.
struct ConvGeometry {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  std::int64_t stride_h, stride_w, padding_h, padding_w, dilation_h, dilation_w, groups;
  bool channels_last = false;
  std::int64_t cg() const { return c / groups; }
  std::int64_t og() const { return o / groups; }
  bool operator==(const ConvGeometry&) const = default;
};

/// Who computes a convolution: im2col + kernels::gemm (both dtypes), or oneDNN's convolution primitives
/// (float32 only). `automatic` is the measured rule of conv2d_path.
enum class ConvPath { automatic, im2col, onednn };
/// The three directions of a convolution, each with its own primitive and its own choice of path.
enum class ConvDirection { forward, input_grad, weight_grad };

/// The path `automatic` takes for this direction, geometry and dtype (float64 is always im2col; a channels-last
/// float32 convolution always oneDNN, on NHWC memory).
ConvPath conv2d_path(ConvDirection direction, const ConvGeometry& g, bool float64);

/// out = conv(x, w) + bias (bias may be null).
void conv2d_forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g,
                    ConvPath path = ConvPath::automatic);
void conv2d_forward(const double* x, const double* w, const double* bias, double* out, const ConvGeometry& g,
                    ConvPath path = ConvPath::automatic);

/// dx = the gradient w.r.t. the input, given grad_output [n, o, oh, ow] (overwritten, not accumulated).
void conv2d_input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g,
                       ConvPath path = ConvPath::automatic);
void conv2d_input_grad(const double* grad_output, const double* w, double* dx, const ConvGeometry& g,
                       ConvPath path = ConvPath::automatic);

/// dw = the gradient w.r.t. the weight, and db (if not null) the bias gradient, grad_output summed per channel;
/// the oneDNN path computes both in one pass over grad_output.
void conv2d_weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g,
                        ConvPath path = ConvPath::automatic);
void conv2d_weight_grad(const double* x, const double* grad_output, double* dw, double* db, const ConvGeometry& g,
                        ConvPath path = ConvPath::automatic);

/// conv2d_input_grad and conv2d_weight_grad in one call: the same results, and on the oneDNN path grad_output
/// is reordered into the primitives' layout once for both.
void conv2d_backward(const float* x, const float* grad_output, const float* w, float* dx, float* dw, float* db,
                     const ConvGeometry& g, ConvPath path = ConvPath::automatic);
void conv2d_backward(const double* x, const double* grad_output, const double* w, double* dx, double* dw,
                     double* db, const ConvGeometry& g, ConvPath path = ConvPath::automatic);

/// The oneDNN primitive cache: how many primitives it holds now, and the most it ever holds (least recently
/// used evicted first). Primitives are keyed by direction, geometry, bias and thread count.
std::size_t conv2d_cache_size();
std::size_t conv2d_cache_capacity();

}  // namespace tapegrad::kernels
