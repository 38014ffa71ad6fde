// Convolution: im2col + one GEMM (framework/kernels) per sample and group, parallel over the batch; the gradient ops
// reuse the same column layout (GEMM + col2im for the input, GEMM against the columns for the weight).
#include <tapegrad/framework/ops/conv.h>

#include <omp.h>

// Note: GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when inlining
// Eigen's packet transpose; the diagnostic is keyed to the header's lines, so it is silenced for them only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <algorithm>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad {

std::string IntPair::str() const { return fmt::format("({}, {})", h, w); }

std::int64_t conv_output_size(std::int64_t input, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                              std::int64_t dilation) {
  const std::int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1;
  // Note: C++ division truncates toward zero; a negative span means "no output", not output 1.
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

struct ConvParams {
  IntPair stride, padding, dilation;
  std::int64_t groups;
};

// Every extent a kernel needs. The column matrix of one (sample, group) is [ck, l]: row (c, ki, kj),
// column (oh, ow), holding input[c][oh*sh - ph + ki*dh][ow*sw - pw + kj*dw] or 0 in the padding.
struct Geometry {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  ConvParams p;
  std::int64_t cg() const { return c / p.groups; }
  std::int64_t og() const { return o / p.groups; }
  std::int64_t ck() const { return cg() * kh * kw; }
  std::int64_t l() const { return oh * ow; }
  // A 1x1 kernel with unit stride and no padding: the input planes already are the column matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && p.stride.h == 1 && p.stride.w == 1 && p.padding.h == 0 && p.padding.w == 0;
  }
};

Geometry make_geometry(const char* op, const Shape& input, const Shape& weight, const ConvParams& p) {
  if (p.stride.h < 1 || p.stride.w < 1) fail("{}: stride must be positive, got {}", op, p.stride.str());
  if (p.dilation.h < 1 || p.dilation.w < 1) fail("{}: dilation must be positive, got {}", op, p.dilation.str());
  if (p.padding.h < 0 || p.padding.w < 0) fail("{}: padding must be non-negative, got {}", op, p.padding.str());
  if (p.groups < 1) fail("{}: groups must be positive, got {}", op, p.groups);
  if (input.size() != 4) fail("{}: expected a 4-d input [N, C, H, W], got {}", op, shape_string(input));
  if (weight.size() != 4) fail("{}: expected a 4-d weight [O, C/groups, kh, kw], got {}", op, shape_string(weight));
  for (std::int64_t extent : weight)
    if (extent < 1) fail("{}: weight {} has an empty dim", op, shape_string(weight));
  Geometry g{input[0], input[1], input[2], input[3], weight[0], weight[2], weight[3], 0, 0, p};
  if (g.o % p.groups != 0)
    fail("{}: weight {} has {} output channels, not divisible by groups={}", op, shape_string(weight), g.o, p.groups);
  if (weight[1] * p.groups != g.c)
    fail("{}: weight {} expects {} input channels (groups={}), but input {} has {}", op, shape_string(weight),
         weight[1] * p.groups, p.groups, shape_string(input), g.c);
  g.oh = conv_output_size(g.h, g.kh, p.stride.h, p.padding.h, p.dilation.h);
  g.ow = conv_output_size(g.w, g.kw, p.stride.w, p.padding.w, p.dilation.w);
  if (g.oh < 1 || g.ow < 1)
    fail("{}: input {} padded to {} x {} is smaller than the dilated kernel {} x {}", op, shape_string(input),
         g.h + 2 * p.padding.h, g.w + 2 * p.padding.w, p.dilation.h * (g.kh - 1) + 1, p.dilation.w * (g.kw - 1) + 1);
  return g;
}

void check_floating_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  a.check_defined(op);
  b.check_defined(op);
  if (!is_floating(a.dtype()) || a.dtype() != b.dtype())
    fail("{}: {} is {} and {} is {}; expected the same float dtype", op, a_name, dtype_name(a.dtype()), b_name,
         dtype_name(b.dtype()));
}

void check_grad_output(const char* op, const Tensor& grad_output, const Geometry& g) {
  const Shape expected{g.n, g.o, g.oh, g.ow};
  if (grad_output.shape() != expected)
    fail("{}: grad_output {} does not match the convolution's output shape {}", op, shape_string(grad_output.shape()),
         shape_string(expected));
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The output columns [lo, hi) whose input column ow*stride + offset lies inside [0, width).
std::pair<std::int64_t, std::int64_t> valid_columns(std::int64_t offset, std::int64_t stride, std::int64_t width,
                                                    std::int64_t out_width) {
  const std::int64_t lo = offset >= 0 ? 0 : ceil_div(-offset, stride);
  const std::int64_t hi = width - offset <= 0 ? 0 : std::min(out_width, ceil_div(width - offset, stride));
  return {std::min(lo, hi), hi};
}

// Visits every (column-matrix row, output row) pair whose input row is inside the image with
// fn(row pointer offset, input row base index, valid column range, column offset); rows in the padding
// get pad(row pointer offset). Shared by im2col and col2im so both walk exactly the same layout.
template <class Inside, class Outside>
void walk_columns(const Geometry& g, Inside inside, Outside outside) {
  const auto& p = g.p;
  std::int64_t row = 0;
  for (std::int64_t c = 0; c < g.cg(); ++c)
    for (std::int64_t ki = 0; ki < g.kh; ++ki)
      for (std::int64_t kj = 0; kj < g.kw; ++kj, ++row) {
        const std::int64_t offset = kj * p.dilation.w - p.padding.w;
        const auto [lo, hi] = valid_columns(offset, p.stride.w, g.w, g.ow);
        for (std::int64_t oh = 0; oh < g.oh; ++oh) {
          const std::int64_t ih = oh * p.stride.h - p.padding.h + ki * p.dilation.h;
          const std::int64_t dst = row * g.l() + oh * g.ow;
          if (ih < 0 || ih >= g.h)
            outside(dst);
          else
            inside(dst, (c * g.h + ih) * g.w + offset, lo, hi);
        }
      }
}

// im2col when both strides are 1 and the output is as wide as the input (a "same" 3x3, pad 1 conv, and the
// input-gradient conv): then a column-matrix row is one contiguous run of the input plane, shifted, with
// the columns that fall into the side padding zeroed afterwards. One long copy per row instead of one short
// copy per output row. Returns false for other geometries.
template <class T>
bool im2col_same_width(const T* x, T* col, const Geometry& g) {
  const auto& p = g.p;
  if (p.stride.w != 1 || p.stride.h != 1 || g.w != g.ow) return false;
  const std::int64_t ow = g.ow, l = g.l();
  std::int64_t row = 0;
  for (std::int64_t c = 0; c < g.cg(); ++c)
    for (std::int64_t ki = 0; ki < g.kh; ++ki)
      for (std::int64_t kj = 0; kj < g.kw; ++kj, ++row) {
        T* dst = col + row * l;
        const std::int64_t offset = kj * p.dilation.w - p.padding.w, shift_h = ki * p.dilation.h - p.padding.h;
        const auto [lo, hi] = valid_columns(offset, 1, g.w, ow);
        // Output rows [first, last) read input rows first + shift_h ... inside [0, h).
        const std::int64_t first = std::clamp<std::int64_t>(-shift_h, 0, g.oh);
        const std::int64_t last = std::clamp<std::int64_t>(g.h - shift_h, first, g.oh);
        if (hi <= lo || last <= first) {
          std::fill(dst, dst + l, T(0));
          continue;
        }
        std::fill(dst, dst + first * ow + lo, T(0));
        std::fill(dst + (last - 1) * ow + hi, dst + l, T(0));
        // Note: element k of the row reads input element source + k; the range starts and ends on valid
        // columns, so every read is inside the plane (the wrapped-around side columns are zeroed below).
        const std::int64_t source = (c * g.h + shift_h) * g.w + offset;
        const std::int64_t begin = first * ow + lo, end = (last - 1) * ow + hi;
        std::copy(x + (source + begin), x + (source + end), dst + begin);
        for (std::int64_t oh = first; oh < last; ++oh) {
          T* out = dst + oh * ow;
          for (std::int64_t j = 0; j < lo; ++j) out[j] = T(0);
          for (std::int64_t j = hi; j < ow; ++j) out[j] = T(0);
        }
      }
  return true;
}

template <class T>
void im2col(const T* x, T* col, const Geometry& g) {
  if (im2col_same_width(x, col, g)) return;
  const std::int64_t ow = g.ow, sw = g.p.stride.w;
  walk_columns(
      g,
      [&](std::int64_t dst, std::int64_t src, std::int64_t lo, std::int64_t hi) {
        T* out = col + dst;
        std::fill(out, out + lo, T(0));
        // Note: rows are short (a 14-pixel feature map row), so an inlined loop beats a memmove call.
        if (sw == 1) {
          const T* in = x + (src + lo);
          for (std::int64_t j = 0; j < hi - lo; ++j) out[lo + j] = in[j];
        } else
          for (std::int64_t j = lo; j < hi; ++j) out[j] = x[src + j * sw];
        std::fill(out + hi, out + ow, T(0));
      },
      [&](std::int64_t dst) { std::fill(col + dst, col + dst + ow, T(0)); });
}

template <class T>
void col2im(const T* col, T* x, const Geometry& g) {
  const std::int64_t sw = g.p.stride.w;
  walk_columns(
      g,
      [&](std::int64_t dst, std::int64_t src, std::int64_t lo, std::int64_t hi) {
        const T* in = col + dst;
        if (sw == 1) {
          T* out = x + (src + lo);
          for (std::int64_t j = 0; j < hi - lo; ++j) out[j] += in[lo + j];
        } else {
          for (std::int64_t j = lo; j < hi; ++j) x[src + j * sw] += in[j];
        }
      },
      [](std::int64_t) {});
}

// Runs fn(sample, scratch, thread) for every sample, over OpenMP threads when the batch and the work are
// big enough, each thread with its own scratch buffer of `scratch_size` elements.
// Note: the scratch is a Storage, not a std::vector: uninitialised (im2col writes every element) and
// reused from the block cache, where a vector zero-filled a fresh mmap'd block on every call.
// Note: inside the parallel region the GEMM runs single-threaded (OpenMP does not nest), so there is no
// nested parallelism; a batch of one instead lets the GEMM parallelise itself.
template <class T, class F>
void for_each_sample(const Geometry& g, std::int64_t scratch_size, int threads, F fn) {
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      Storage scratch(static_cast<std::size_t>(scratch_size) * sizeof(T));
      const int thread = omp_get_thread_num();
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < g.n; ++n) fn(n, static_cast<T*>(scratch.data()), thread);
    }
  } else {
    Storage scratch(static_cast<std::size_t>(scratch_size) * sizeof(T));
    for (std::int64_t n = 0; n < g.n; ++n) fn(n, static_cast<T*>(scratch.data()), 0);
  }
}

int batch_threads(const Geometry& g) {
  const std::int64_t flops = g.n * g.o * g.ck() * g.l();
  if (g.n < 2 || flops < (1 << 16) || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), g.n));
}

template <class T>
void forward_kernel(const T* x, const T* w, const T* b, T* out, const Geometry& g) {
  const std::int64_t ck = g.ck(), l = g.l(), og = g.og(), plane = g.h * g.w;
  const bool pointwise = g.pointwise();
  for_each_sample<T>(g, pointwise ? 0 : ck * l, batch_threads(g), [&](std::int64_t n, T* col, int) {
    for (std::int64_t group = 0; group < g.p.groups; ++group) {
      const T* xs = x + (n * g.c + group * g.cg()) * plane;
      if (!pointwise) im2col(xs, col, g);
      T* result = out + (n * g.o + group * og) * l;
      if (b)  // the bias first, then the GEMM accumulates onto it (beta = 1)
        for (std::int64_t row = 0; row < og; ++row) std::fill(result + row * l, result + (row + 1) * l, b[group * og + row]);
      kernels::gemm(false, false, og, l, ck, T(1), w + group * og * ck, ck, pointwise ? xs : col, l, b ? T(1) : T(0),
                    result, l);
    }
  });
}

// Note: with unit stride the input gradient is itself a convolution: grad_output, padded by
// dil*(k-1) - pad, correlated with the weight flipped in space and with its two channel dims swapped.
// That path copies (im2col) instead of scatter-adding (col2im), which is faster.
template <class T>
bool input_grad_as_conv(const T* gout, const T* w, T* dx, const Geometry& g) {
  const auto& p = g.p;
  const std::int64_t pad_h = p.dilation.h * (g.kh - 1) - p.padding.h, pad_w = p.dilation.w * (g.kw - 1) - p.padding.w;
  if (p.stride.h != 1 || p.stride.w != 1 || pad_h < 0 || pad_w < 0) return false;
  const std::int64_t og = g.og(), cg = g.cg(), taps = g.kh * g.kw;
  std::vector<T> flipped(static_cast<std::size_t>(g.c * og * taps));
  for (std::int64_t group = 0; group < p.groups; ++group)
    for (std::int64_t o = 0; o < og; ++o)
      for (std::int64_t c = 0; c < cg; ++c) {
        const T* from = w + ((group * og + o) * cg + c) * taps;
        T* to = flipped.data() + ((group * cg + c) * og + o) * taps;
        for (std::int64_t t = 0; t < taps; ++t) to[t] = from[taps - 1 - t];
      }
  const Geometry t{g.n, g.o, g.oh, g.ow, g.c, g.kh, g.kw, g.h, g.w, {1, {pad_h, pad_w}, p.dilation, p.groups}};
  forward_kernel<T>(gout, flipped.data(), nullptr, dx, t);
  return true;
}

template <class T>
void input_grad_kernel(const T* gout, const T* w, T* dx, const Geometry& g) {
  const std::int64_t ck = g.ck(), l = g.l(), og = g.og(), plane = g.h * g.w;
  const bool pointwise = g.pointwise();
  if (!pointwise && input_grad_as_conv(gout, w, dx, g)) return;
  for_each_sample<T>(g, pointwise ? 0 : ck * l, batch_threads(g), [&](std::int64_t n, T* col, int) {
    T* dxs = dx + n * g.c * plane;
    if (!pointwise) std::fill(dxs, dxs + g.c * plane, T(0));
    for (std::int64_t group = 0; group < g.p.groups; ++group) {
      T* target = pointwise ? dxs + group * g.cg() * plane : col;
      kernels::gemm(true, false, ck, l, og, T(1), w + group * og * ck, ck, gout + (n * g.o + group * og) * l, l, T(0),
                    target, l);
      if (!pointwise) col2im(col, dxs + group * g.cg() * plane, g);
    }
  });
}

// Note: each thread sums its own samples into a private [O, ck] partial, and the partials are added in
// thread order afterwards, so the result is deterministic for a given thread count.
template <class T>
void weight_grad_kernel(const T* x, const T* gout, T* dw, const Geometry& g) {
  const std::int64_t ck = g.ck(), l = g.l(), og = g.og(), plane = g.h * g.w;
  const bool pointwise = g.pointwise();
  const int threads = batch_threads(g);
  std::vector<std::vector<T>> partials(static_cast<std::size_t>(threads));
  for_each_sample<T>(g, pointwise ? 0 : ck * l, threads, [&](std::int64_t n, T* col, int thread) {
    auto& partial = partials[static_cast<std::size_t>(thread)];
    if (partial.empty()) partial.assign(static_cast<std::size_t>(g.o * ck), T(0));
    for (std::int64_t group = 0; group < g.p.groups; ++group) {
      const T* xs = x + (n * g.c + group * g.cg()) * plane;
      if (!pointwise) im2col(xs, col, g);
      kernels::gemm(false, true, og, ck, l, T(1), gout + (n * g.o + group * og) * l, l, pointwise ? xs : col, l, T(1),
                    partial.data() + group * og * ck, ck);
    }
  });
  std::fill(dw, dw + g.o * ck, T(0));
  for (const auto& partial : partials)
    for (std::size_t i = 0; i < partial.size(); ++i) dw[i] += partial[i];
}

// The bias gradient: grad_output summed over batch and positions, per channel.
Tensor bias_grad(const Tensor& grad_output_in) {
  const Tensor grad_output = grad_output_in.contiguous();
  const std::int64_t n = grad_output.size(0), o = grad_output.size(1), l = grad_output.size(2) * grad_output.size(3);
  Tensor out = empty({o}, grad_output.dtype());
  detail::dispatch_floating(grad_output.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_output.data<T>();
    T* result = out.data<T>();
    for (std::int64_t c = 0; c < o; ++c) {
      T total = 0;
      for (std::int64_t s = 0; s < n; ++s)
        total += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(g + (s * o + c) * l, l).sum();
      result[c] = total;
    }
  });
  return out;
}

Tensor conv2d_batched(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, const ConvParams& p) {
  const Tensor input = input_in.contiguous(), weight = weight_in.contiguous(), bias = bias_in.contiguous();
  const Geometry g = make_geometry("conv2d", input.shape(), weight.shape(), p);
  if (bias.defined()) {
    check_floating_pair("conv2d", input, "input", bias, "bias");
    if (bias.shape() != Shape{g.o})
      fail("conv2d: bias {} must be [{}], one value per output channel", shape_string(bias.shape()), g.o);
  }
  Tensor out = empty({g.n, g.o, g.oh, g.ow}, input.dtype());
  detail::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T>(input.data<T>(), weight.data<T>(), bias.defined() ? bias.data<T>() : nullptr, out.data<T>(), g);
  });
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  return record_if_needed("conv2d", out, inputs, [&] {
    return [sx = SavedTensor(input, "conv2d"), sw = SavedTensor(weight, "conv2d"), has_bias = bias.defined(), p](
               const Tensor& grad, NeedsGrad needs) {
      std::vector<Tensor> grads(has_bias ? 3 : 2);
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      if (needs[0]) grads[0] = conv2d_input_grad(grad, w, x.shape(), p.stride, p.padding, p.dilation, p.groups);
      if (needs[1]) grads[1] = conv2d_weight_grad(x, grad, w.shape(), p.stride, p.padding, p.dilation, p.groups);
      // Note: the fused per-channel sum is not differentiable; under create_graph the recorded sum is used.
      if (has_bias && needs[2]) grads[2] = is_grad_enabled() ? sum(grad, {0, 2, 3}) : bias_grad(grad);
      return grads;
    };
  });
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntPair stride, IntPair padding,
              IntPair dilation, std::int64_t groups) {
  check_floating_pair("conv2d", input, "input", weight, "weight");
  const ConvParams p{stride, padding, dilation, groups};
  if (input.dim() == 3) {
    // Unbatched [C, H, W]: a batch of one, as PyTorch does.
    Shape batched{1};
    batched.insert(batched.end(), input.shape().begin(), input.shape().end());
    Tensor out = conv2d_batched(input.reshape(batched), weight, bias, p);
    return out.reshape(Shape(out.shape().begin() + 1, out.shape().end()));
  }
  if (input.dim() != 4)
    fail("conv2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got {}", shape_string(input.shape()));
  return conv2d_batched(input, weight, bias, p);
}

Tensor conv2d_input_grad(const Tensor& grad_output_in, const Tensor& weight_in, const Shape& input_shape, IntPair stride,
                         IntPair padding, IntPair dilation, std::int64_t groups) {
  const Tensor grad_output = grad_output_in.contiguous(), weight = weight_in.contiguous();
  check_floating_pair("conv2d_input_grad", grad_output, "grad_output", weight, "weight");
  const ConvParams p{stride, padding, dilation, groups};
  const Geometry g = make_geometry("conv2d_input_grad", input_shape, weight.shape(), p);
  check_grad_output("conv2d_input_grad", grad_output, g);
  Tensor out = empty(input_shape, weight.dtype());
  detail::dispatch_floating(weight.dtype(), "conv2d_input_grad", [&](auto tag) {
    using T = decltype(tag);
    input_grad_kernel<T>(grad_output.data<T>(), weight.data<T>(), out.data<T>(), g);
  });
  return record_if_needed("conv2d_input_grad", out, {grad_output, weight}, [&] {
    return [sg = SavedTensor(grad_output, "conv2d_input_grad"), sw = SavedTensor(weight, "conv2d_input_grad"), p](
               const Tensor& grad, NeedsGrad needs) {
      // <grad, input_grad(g, w)> = <conv2d(grad, w), g>: differentiate that bilinear form.
      return std::vector<Tensor>{
          needs[0] ? conv2d(grad, sw.get(), Tensor(), p.stride, p.padding, p.dilation, p.groups) : Tensor(),
          needs[1] ? conv2d_weight_grad(grad, sg.get(), sw.get().shape(), p.stride, p.padding, p.dilation, p.groups)
                   : Tensor()};
    };
  });
}

Tensor conv2d_weight_grad(const Tensor& input_in, const Tensor& grad_output_in, const Shape& weight_shape, IntPair stride,
                          IntPair padding, IntPair dilation, std::int64_t groups) {
  const Tensor input = input_in.contiguous(), grad_output = grad_output_in.contiguous();
  check_floating_pair("conv2d_weight_grad", input, "input", grad_output, "grad_output");
  const ConvParams p{stride, padding, dilation, groups};
  const Geometry g = make_geometry("conv2d_weight_grad", input.shape(), weight_shape, p);
  check_grad_output("conv2d_weight_grad", grad_output, g);
  Tensor out = empty(weight_shape, input.dtype());
  detail::dispatch_floating(input.dtype(), "conv2d_weight_grad", [&](auto tag) {
    using T = decltype(tag);
    weight_grad_kernel<T>(input.data<T>(), grad_output.data<T>(), out.data<T>(), g);
  });
  return record_if_needed("conv2d_weight_grad", out, {input, grad_output}, [&] {
    return [sx = SavedTensor(input, "conv2d_weight_grad"), sg = SavedTensor(grad_output, "conv2d_weight_grad"), p](
               const Tensor& grad, NeedsGrad needs) {
      // <grad, weight_grad(x, g)> = <conv2d(x, grad), g>.
      return std::vector<Tensor>{
          needs[0] ? conv2d_input_grad(sg.get(), grad, sx.get().shape(), p.stride, p.padding, p.dilation, p.groups)
                   : Tensor(),
          needs[1] ? conv2d(sx.get(), grad, Tensor(), p.stride, p.padding, p.dilation, p.groups) : Tensor()};
    };
  });
}

}  // namespace tapegrad
