// Which path computes a convolution (the measured rule), and the dispatch to it.
#include <tapegrad/framework/kernels/conv2d.h>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/kernels/conv2d_im2col.h>
#include <tapegrad/framework/kernels/conv2d_onednn.h>
#include <tapegrad/framework/kernels/environment_path.h>

#include <vector>

namespace tapegrad::kernels {

// The rule, from bench/conv_layers (every layer of bench/compare's cnn and resnet at batch 64, both paths timed
// interleaved in one run, CPU time per call; docs/performance_history.md has the table):
//   build/release/bench/conv_layers --threads 1 --reps 11
// measured 2026-12-05 on the 2-core AMD EPYC (Zen 5, AVX-512) under load from other jobs (load average ~11).
// oneDNN's direct kernels win on almost every layer and direction, 1.1-2.2x (cnn_conv2: forward 1.14x, input
// gradient 1.41x, weight gradient 1.30x; resnet's weight gradients 1.2-1.9x), except:
//   - forward and input gradient with few input channels per group (cnn_conv1, C = 1: im2col 0.69 ms against
//     1.17 ms forward; resnet_stem, C = 3: 1.24 against 1.63 ms): the K = C*kh*kw GEMM is tiny either way and
//     oneDNN adds the reorder of a wide output out of its blocked layout. Their weight gradients stay on oneDNN
//     (1.21x and 1.73x).
//   - the input gradient of a strided 1x1 convolution (resnet's shortcuts: 1.50 against 2.34 ms, 0.86 against
//     1.14 ms): one GEMM and a sparse col2im, where oneDNN's backward-data kernel is slower.
// Everything else, and all float32 shapes these classes do not name, take oneDNN.
// A channels-last convolution takes oneDNN in every direction: its NHWC kernels read and write the tensors'
// own buffers, while im2col works on NCHW planes and would need the activations transposed in and out.
ConvPath conv2d_path(ConvDirection direction, const ConvGeometry& g, bool float64) {
  if (float64 || g.n == 0) return ConvPath::im2col;
  if (g.channels_last) return ConvPath::onednn;
  const bool few_input_channels = g.cg() <= 4;
  const bool strided_pointwise = g.kh == 1 && g.kw == 1 && (g.stride_h > 1 || g.stride_w > 1);
  switch (direction) {
    case ConvDirection::forward:
      return few_input_channels ? ConvPath::im2col : ConvPath::onednn;
    case ConvDirection::input_grad:
      return few_input_channels || strided_pointwise ? ConvPath::im2col : ConvPath::onednn;
    case ConvDirection::weight_grad:
      return ConvPath::onednn;
  }
  return ConvPath::onednn;
}

namespace {

// Note: TAPEGRAD_CONV_PATH=im2col or =onednn overrides the rule for every float32 convolution (read once), so
// that one binary measures whole workloads on either path in the same run (docs/performance.md); an explicit
// path given to a kernel still wins. Unset or empty, the rule decides.
ConvPath environment_path() {
  static const ConvPath path = path_from_environment(
      "TAPEGRAD_CONV_PATH", ConvPath::automatic, {{"im2col", ConvPath::im2col}, {"onednn", ConvPath::onednn}});
  return path;
}

// The im2col path on channels-last buffers: NHWC <-> NCHW copies around the NCHW kernels. Only float64 (no
// oneDNN) and a forced TAPEGRAD_CONV_PATH=im2col come here; the rule sends float32 channels-last to oneDNN.
template <class T>
std::vector<T> to_nchw(const T* src, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  std::vector<T> dst(static_cast<std::size_t>(n * c * h * w));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h * w; ++y)
      for (std::int64_t k = 0; k < c; ++k)
        dst[static_cast<std::size_t>((b * c + k) * h * w + y)] = src[(b * h * w + y) * c + k];
  return dst;
}

template <class T>
void to_nhwc(const std::vector<T>& src, T* dst, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h * w; ++y)
      for (std::int64_t k = 0; k < c; ++k)
        dst[(b * h * w + y) * c + k] = src[static_cast<std::size_t>((b * c + k) * h * w + y)];
}

ConvGeometry planar(ConvGeometry g) {
  g.channels_last = false;
  return g;
}

template <class T>
void im2col_forward(const T* x, const T* w, const T* bias, T* out, const ConvGeometry& g) {
  if (!g.channels_last) return im2col::forward(x, w, bias, out, g);
  std::vector<T> planes(static_cast<std::size_t>(g.n * g.o * g.oh * g.ow));
  im2col::forward(to_nchw(x, g.n, g.c, g.h, g.w).data(), w, bias, planes.data(), planar(g));
  to_nhwc(planes, out, g.n, g.o, g.oh, g.ow);
}

template <class T>
void im2col_input_grad(const T* grad_output, const T* w, T* dx, const ConvGeometry& g) {
  if (!g.channels_last) return im2col::input_grad(grad_output, w, dx, g);
  std::vector<T> planes(static_cast<std::size_t>(g.n * g.c * g.h * g.w));
  im2col::input_grad(to_nchw(grad_output, g.n, g.o, g.oh, g.ow).data(), w, planes.data(), planar(g));
  to_nhwc(planes, dx, g.n, g.c, g.h, g.w);
}

template <class T>
void im2col_weight_grad(const T* x, const T* grad_output, T* dw, T* db, const ConvGeometry& g) {
  if (!g.channels_last) return im2col::weight_grad(x, grad_output, dw, db, g);
  im2col::weight_grad(to_nchw(x, g.n, g.c, g.h, g.w).data(), to_nchw(grad_output, g.n, g.o, g.oh, g.ow).data(), dw,
                      db, planar(g));
}

ConvPath resolve(ConvPath path, ConvDirection direction, const ConvGeometry& g, bool float64) {
  if (float64) return ConvPath::im2col;  // oneDNN has no float64 convolution
  if (path == ConvPath::automatic) path = environment_path();
  return path == ConvPath::automatic ? conv2d_path(direction, g, float64) : path;
}

}  // namespace

void conv2d_forward(const float* x, const float* w, const float* bias, float* out, const ConvGeometry& g,
                    ConvPath path) {
  if (resolve(path, ConvDirection::forward, g, false) == ConvPath::onednn) return onednn::forward(x, w, bias, out, g);
  im2col_forward(x, w, bias, out, g);
}

void conv2d_forward(const double* x, const double* w, const double* bias, double* out, const ConvGeometry& g,
                    ConvPath) {
  im2col_forward(x, w, bias, out, g);
}

void conv2d_input_grad(const float* grad_output, const float* w, float* dx, const ConvGeometry& g, ConvPath path) {
  if (resolve(path, ConvDirection::input_grad, g, false) == ConvPath::onednn)
    return onednn::input_grad(grad_output, w, dx, g);
  im2col_input_grad(grad_output, w, dx, g);
}

void conv2d_input_grad(const double* grad_output, const double* w, double* dx, const ConvGeometry& g, ConvPath) {
  im2col_input_grad(grad_output, w, dx, g);
}

void conv2d_weight_grad(const float* x, const float* grad_output, float* dw, float* db, const ConvGeometry& g,
                        ConvPath path) {
  if (resolve(path, ConvDirection::weight_grad, g, false) == ConvPath::onednn)
    return onednn::weight_grad(x, grad_output, dw, db, g);
  im2col_weight_grad(x, grad_output, dw, db, g);
}

void conv2d_weight_grad(const double* x, const double* grad_output, double* dw, double* db, const ConvGeometry& g,
                        ConvPath) {
  im2col_weight_grad(x, grad_output, dw, db, g);
}

void conv2d_backward(const float* x, const float* grad_output, const float* w, float* dx, float* dw, float* db,
                     const ConvGeometry& g, ConvPath path) {
  if (resolve(path, ConvDirection::input_grad, g, false) == ConvPath::onednn &&
      resolve(path, ConvDirection::weight_grad, g, false) == ConvPath::onednn)
    return onednn::backward(x, grad_output, w, dx, dw, db, g);
  conv2d_input_grad(grad_output, w, dx, g, path);
  conv2d_weight_grad(x, grad_output, dw, db, g, path);
}

void conv2d_backward(const double* x, const double* grad_output, const double* w, double* dx, double* dw,
                     double* db, const ConvGeometry& g, ConvPath path) {
  conv2d_input_grad(grad_output, w, dx, g, path);
  conv2d_weight_grad(x, grad_output, dw, db, g, path);
}

std::size_t conv2d_cache_size() { return onednn::cache_size(); }
std::size_t conv2d_cache_capacity() { return onednn::cache_capacity(); }

}  // namespace tapegrad::kernels
