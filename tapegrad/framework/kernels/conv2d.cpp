// Which path computes a convolution (the measured rule), and the dispatch to it.
#include <tapegrad/framework/kernels/conv2d.h>

#include <tapegrad/framework/kernels/conv2d_im2col.h>
#include <tapegrad/framework/kernels/conv2d_onednn.h>

namespace tapegrad::kernels {

// RULE-PLACEHOLDER
ConvPath conv2d_path(ConvDirection direction, const ConvGeometry& g, bool float64) {
  (void)direction;
  if (float64 || g.n == 0) return ConvPath::im2col;
  return ConvPath::onednn;
}

namespace {

ConvPath resolve(ConvPath path, ConvDirection direction, const ConvGeometry& g, bool float64) {
  if (float64) return ConvPath::im2col;  // oneDNN has no float64 convolution
  return path == ConvPath::automatic ? conv2d_path(direction, g, float64) : path;
}

}  // namespace

void conv2d_forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g,
                    ConvPath path) {
  if (resolve(path, ConvDirection::forward, g, false) == ConvPath::onednn) return onednn::forward(x, w, bias, out, g);
  im2col::forward(x, w, bias, out, g);
}

void conv2d_forward(const double* x, const double* w, const double* bias, double* out, const ConvGeometry& g,
                    ConvPath) {
  im2col::forward(x, w, bias, out, g);
}

void conv2d_input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g, ConvPath path) {
  if (resolve(path, ConvDirection::input_grad, g, false) == ConvPath::onednn)
    return onednn::input_grad(grad_output, w, dx, g);
  im2col::input_grad(grad_output, w, dx, g);
}

void conv2d_input_grad(const double* grad_output, const double* w, double* dx, const ConvGeometry& g, ConvPath) {
  im2col::input_grad(grad_output, w, dx, g);
}

void conv2d_weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g,
                        ConvPath path) {
  if (resolve(path, ConvDirection::weight_grad, g, false) == ConvPath::onednn)
    return onednn::weight_grad(x, grad_output, dw, db, g);
  im2col::weight_grad(x, grad_output, dw, db, g);
}

void conv2d_weight_grad(const double* x, const double* grad_output, double* dw, double* db, const ConvGeometry& g,
                        ConvPath) {
  im2col::weight_grad(x, grad_output, dw, db, g);
}

std::size_t conv2d_cache_size() { return onednn::cache_size(); }
std::size_t conv2d_cache_capacity() { return onednn::cache_capacity(); }

}  // namespace tapegrad::kernels
