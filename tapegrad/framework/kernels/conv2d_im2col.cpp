// Convolution as im2col + one GEMM (kernels::gemm) per sample and group, parallel over the batch; the gradients
// reuse the same column layout (GEMM + col2im for the input, GEMM against the columns for the weight).
#include <tapegrad/framework/kernels/conv2d_im2col.h>

#include <omp.h>

// Note: GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when inlining
// Eigen's packet code; the diagnostic is keyed to the header's lines, so it is silenced for them only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#else
#include <Eigen/Core>
#endif
#include <algorithm>
#include <utility>
#include <vector>

#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad::kernels::im2col {

namespace {

// The column matrix of one (sample, group) is [ck, l]: row (c, ki, kj), column (oh, ow), holding
// input[c][oh*sh - ph + ki*dh][ow*sw - pw + kj*dw] or 0 in the padding.
std::int64_t ck(const ConvGeometry& g) { return g.cg() * g.kh * g.kw; }
std::int64_t positions(const ConvGeometry& g) { return g.oh * g.ow; }

// A 1x1 kernel with unit stride and no padding: the input planes already are the column matrix.
bool pointwise(const ConvGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.padding_h == 0 && g.padding_w == 0;
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
void walk_columns(const ConvGeometry& g, Inside inside, Outside outside) {
  std::int64_t row = 0;
  for (std::int64_t c = 0; c < g.cg(); ++c)
    for (std::int64_t ki = 0; ki < g.kh; ++ki)
      for (std::int64_t kj = 0; kj < g.kw; ++kj, ++row) {
        const std::int64_t offset = kj * g.dilation_w - g.padding_w;
        const auto [lo, hi] = valid_columns(offset, g.stride_w, g.w, g.ow);
        for (std::int64_t oh = 0; oh < g.oh; ++oh) {
          const std::int64_t ih = oh * g.stride_h - g.padding_h + ki * g.dilation_h;
          const std::int64_t dst = row * positions(g) + oh * g.ow;
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
bool im2col_same_width(const T* x, T* col, const ConvGeometry& g) {
  if (g.stride_w != 1 || g.stride_h != 1 || g.w != g.ow) return false;
  const std::int64_t ow = g.ow, l = positions(g);
  std::int64_t row = 0;
  for (std::int64_t c = 0; c < g.cg(); ++c)
    for (std::int64_t ki = 0; ki < g.kh; ++ki)
      for (std::int64_t kj = 0; kj < g.kw; ++kj, ++row) {
        T* dst = col + row * l;
        const std::int64_t offset = kj * g.dilation_w - g.padding_w, shift_h = ki * g.dilation_h - g.padding_h;
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
void im2col(const T* x, T* col, const ConvGeometry& g) {
  if (im2col_same_width(x, col, g)) return;
  const std::int64_t ow = g.ow, sw = g.stride_w;
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
void col2im(const T* col, T* x, const ConvGeometry& g) {
  const std::int64_t sw = g.stride_w;
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
void for_each_sample(const ConvGeometry& g, std::int64_t scratch_size, int threads, F fn) {
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

int batch_threads(const ConvGeometry& g) {
  const std::int64_t flops = g.n * g.o * ck(g) * positions(g);
  if (g.n < 2 || flops < (1 << 16) || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), g.n));
}

// Note: with unit stride the input gradient is itself a convolution: grad_output, padded by
// dil*(k-1) - pad, correlated with the weight flipped in space and with its two channel dims swapped.
// That path copies (im2col) instead of scatter-adding (col2im), which is faster.
template <class T>
bool input_grad_as_conv(const T* gout, const T* w, T* dx, const ConvGeometry& g) {
  const std::int64_t pad_h = g.dilation_h * (g.kh - 1) - g.padding_h, pad_w = g.dilation_w * (g.kw - 1) - g.padding_w;
  if (g.stride_h != 1 || g.stride_w != 1 || pad_h < 0 || pad_w < 0) return false;
  const std::int64_t og = g.og(), cg = g.cg(), taps = g.kh * g.kw;
  std::vector<T> flipped(static_cast<std::size_t>(g.c * og * taps));
  for (std::int64_t group = 0; group < g.groups; ++group)
    for (std::int64_t o = 0; o < og; ++o)
      for (std::int64_t c = 0; c < cg; ++c) {
        const T* from = w + ((group * og + o) * cg + c) * taps;
        T* to = flipped.data() + ((group * cg + c) * og + o) * taps;
        for (std::int64_t t = 0; t < taps; ++t) to[t] = from[taps - 1 - t];
      }
  const ConvGeometry t{g.n,   g.o,   g.oh, g.ow, g.c, g.kh, g.kw, g.h, g.w, 1, 1, pad_h, pad_w,
                       g.dilation_h, g.dilation_w, g.groups};
  forward<T>(gout, flipped.data(), nullptr, dx, t);
  return true;
}

}  // namespace

template <class T>
void forward(const T* x, const T* w, const T* bias, T* out, const ConvGeometry& g) {
  const std::int64_t k = ck(g), l = positions(g), og = g.og(), plane = g.h * g.w;
  const bool direct = pointwise(g);
  for_each_sample<T>(g, direct ? 0 : k * l, batch_threads(g), [&](std::int64_t n, T* col, int) {
    for (std::int64_t group = 0; group < g.groups; ++group) {
      const T* xs = x + (n * g.c + group * g.cg()) * plane;
      if (!direct) im2col(xs, col, g);
      T* result = out + (n * g.o + group * og) * l;
      if (bias)  // the bias first, then the GEMM accumulates onto it (beta = 1)
        for (std::int64_t row = 0; row < og; ++row)
          std::fill(result + row * l, result + (row + 1) * l, bias[group * og + row]);
      gemm(false, false, og, l, k, T(1), w + group * og * k, k, direct ? xs : col, l, bias ? T(1) : T(0), result, l);
    }
  });
}

template <class T>
void input_grad(const T* gout, const T* w, T* dx, const ConvGeometry& g) {
  const std::int64_t k = ck(g), l = positions(g), og = g.og(), plane = g.h * g.w;
  const bool direct = pointwise(g);
  if (!direct && input_grad_as_conv(gout, w, dx, g)) return;
  for_each_sample<T>(g, direct ? 0 : k * l, batch_threads(g), [&](std::int64_t n, T* col, int) {
    T* dxs = dx + n * g.c * plane;
    if (!direct) std::fill(dxs, dxs + g.c * plane, T(0));
    for (std::int64_t group = 0; group < g.groups; ++group) {
      T* target = direct ? dxs + group * g.cg() * plane : col;
      gemm(true, false, k, l, og, T(1), w + group * og * k, k, gout + (n * g.o + group * og) * l, l, T(0), target, l);
      if (!direct) col2im(col, dxs + group * g.cg() * plane, g);
    }
  });
}

// Note: each thread sums its own samples into a private [O, ck] partial, and the partials are added in
// thread order afterwards, so the result is deterministic for a given thread count.
template <class T>
void weight_grad(const T* x, const T* gout, T* dw, T* db, const ConvGeometry& g) {
  const std::int64_t k = ck(g), l = positions(g), og = g.og(), plane = g.h * g.w;
  const bool direct = pointwise(g);
  const int threads = batch_threads(g);
  std::vector<std::vector<T>> partials(static_cast<std::size_t>(threads));
  for_each_sample<T>(g, direct ? 0 : k * l, threads, [&](std::int64_t n, T* col, int thread) {
    auto& partial = partials[static_cast<std::size_t>(thread)];
    if (partial.empty()) partial.assign(static_cast<std::size_t>(g.o * k), T(0));
    for (std::int64_t group = 0; group < g.groups; ++group) {
      const T* xs = x + (n * g.c + group * g.cg()) * plane;
      if (!direct) im2col(xs, col, g);
      gemm(false, true, og, k, l, T(1), gout + (n * g.o + group * og) * l, l, direct ? xs : col, l, T(1),
           partial.data() + group * og * k, k);
    }
  });
  std::fill(dw, dw + g.o * k, T(0));
  for (const auto& partial : partials)
    for (std::size_t i = 0; i < partial.size(); ++i) dw[i] += partial[i];
  if (!db) return;
  // The bias gradient: grad_output summed over batch and positions, per channel.
  for (std::int64_t channel = 0; channel < g.o; ++channel) {
    T total = 0;
    for (std::int64_t n = 0; n < g.n; ++n)
      total += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(gout + (n * g.o + channel) * l, l).sum();
    db[channel] = total;
  }
}

template void forward<float>(const float*, const float*, const float*, float*, const ConvGeometry&);
template void forward<double>(const double*, const double*, const double*, double*, const ConvGeometry&);
template void input_grad<float>(const float*, const float*, float*, const ConvGeometry&);
template void input_grad<double>(const double*, const double*, double*, const ConvGeometry&);
template void weight_grad<float>(const float*, const float*, float*, float*, const ConvGeometry&);
template void weight_grad<double>(const double*, const double*, double*, double*, const ConvGeometry&);

}  // namespace tapegrad::kernels::im2col
