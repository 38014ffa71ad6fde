// flip and pad. flip reads x through negated strides; its backward is the same flip. Constant padding copies
// x into a filled tensor; its backward is the opposite (cropping) pad of the gradient. Reflect and replicate
// padding are an index_select per padded dim, whose backward (index_add) sums the repeated borders.
#include <tapegrad/framework/ops/flip_pad.h>

#include <algorithm>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
  }
  return "unknown";
}

// Pads (negative: crops) the last pads.size() / 2 dims with `value`; the checks are done.
Tensor constant_pad(const Tensor& x, const std::vector<std::int64_t>& pads, const Shape& shape, double value) {
  Tensor out = full(shape, value, TensorOptions{}.with_dtype(x.dtype()));
  // The part of x that survives the crops, and where it lands in out.
  Tensor from = x.detach(), to = out;
  bool overlap = true;
  for (std::size_t k = 0; k < pads.size() / 2; ++k) {
    const auto d = x.dim() - 1 - static_cast<std::int64_t>(k);
    const std::int64_t before = pads[2 * k], after = pads[2 * k + 1];
    const std::int64_t kept = x.size(d) - std::max<std::int64_t>(0, -before) - std::max<std::int64_t>(0, -after);
    if (kept <= 0) {
      overlap = false;
      break;
    }
    from = narrow(from, d, std::max<std::int64_t>(0, -before), kept);
    to = narrow(to, d, std::max<std::int64_t>(0, before), kept);
  }
  if (overlap && from.numel() > 0) to.copy_(from);
  return record_if_needed("constant_pad", out, {x}, [&] {
    std::vector<std::int64_t> crop(pads.size());
    std::transform(pads.begin(), pads.end(), crop.begin(), [](std::int64_t p) { return -p; });
    return [crop](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{pad(g, crop, PadMode::Constant, 0.0)}; };
  });
}

// For each output position along a dim of `size` padded by (before, after), the input position it copies:
// PyTorch's reflection_pad / replication_pad index rule, negative pads included.
Tensor border_index(std::int64_t size, std::int64_t before, std::int64_t after, PadMode mode) {
  const std::int64_t out_size = size + before + after;
  const std::int64_t in_start = std::max<std::int64_t>(0, -before), out_start = std::max<std::int64_t>(0, before);
  std::vector<std::int64_t> index(static_cast<std::size_t>(out_size));
  for (std::int64_t j = 0; j < out_size; ++j) {
    std::int64_t i = j;
    if (j < before) i = mode == PadMode::Reflect ? 2 * before - j : before;
    else if (j >= size + before) i = mode == PadMode::Reflect ? 2 * (size + before - 1) - j : size + before - 1;
    index[static_cast<std::size_t>(j)] = std::clamp<std::int64_t>(i - out_start + in_start, 0, size - 1);
  }
  return from_vector(index, {out_size});
}

Tensor border_pad(const Tensor& x, const std::vector<std::int64_t>& pads, PadMode mode) {
  const auto dims = static_cast<std::int64_t>(pads.size() / 2);
  if (dims < 1 || dims > 3 || (x.dim() != dims + 1 && x.dim() != dims + 2))
    fail("pad: {} padding of the last {} dims (pad list of {} entries) needs a {}-D or {}-D (batched) input, got "
         "shape {}; only 2-D to 5-D inputs with 1 to 3 padded dims are supported, as in PyTorch 1.13",
         mode_name(mode), dims, pads.size(), dims + 1, dims + 2, shape_string(x.shape()));
  if (x.dtype() == DType::Int64)
    fail("pad: {} padding is not implemented for int64 (input {}), as in PyTorch", mode_name(mode),
         shape_string(x.shape()));
  for (std::int64_t k = 0; k < dims; ++k) {
    const std::int64_t d = x.dim() - 1 - k, size = x.size(d);
    const std::int64_t before = pads[static_cast<std::size_t>(2 * k)], after = pads[static_cast<std::size_t>(2 * k + 1)];
    if (mode == PadMode::Reflect && (before >= size || after >= size))
      fail("pad: reflect padding size should be less than the corresponding input dimension, but got padding "
           "({}, {}) at dimension {} of input {}",
           before, after, d, shape_string(x.shape()));
    if (size < 1 || size + before + after < 1)
      fail("pad: input {} is too small for {} padding ({}, {}) at dimension {}: output size {}",
           shape_string(x.shape()), mode_name(mode), before, after, d, size + before + after);
  }
  Tensor y = x;
  for (std::int64_t k = 0; k < dims; ++k) {
    const std::int64_t d = x.dim() - 1 - k;
    y = index_select(y, d, border_index(x.size(d), pads[static_cast<std::size_t>(2 * k)],
                                        pads[static_cast<std::size_t>(2 * k + 1)], mode));
  }
  return y;
}

}  // namespace

Tensor flip(const Tensor& x_in, const std::vector<std::int64_t>& dims) {
  x_in.check_defined("flip");
  std::vector<bool> flipped(static_cast<std::size_t>(std::max<std::int64_t>(x_in.dim(), 1)), false);
  for (const std::int64_t dim : dims) {
    const auto d = static_cast<std::size_t>(normalize_dim(dim, x_in.dim(), "flip"));
    if (flipped[d])
      fail("flip: dim {} appears multiple times in the list of dims {} (tensor of shape {})", d, shape_string(dims),
           shape_string(x_in.shape()));
    flipped[d] = true;
  }
  const Tensor x = x_in.contiguous();
  Tensor out = empty(x.shape(), x.dtype());
  // Read x from its last element along each flipped dim, stepping backwards.
  Shape strides = contiguous_strides(x.shape());
  std::int64_t base = 0;
  for (std::size_t d = 0; d < strides.size(); ++d)
    if (flipped[d]) {
      base += (x.shape()[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    detail::for_each_run(x.shape(), strides, base, [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t st) {
      for (std::int64_t k = 0; k < inner; ++k) dst[o + k] = src[s + k * st];
    });
  });
  return record_if_needed("flip", out, {x}, [&] {
    return [dims](const Tensor& g, NeedsGrad) { return std::vector<Tensor>{flip(g, dims)}; };
  });
}

Tensor pad(const Tensor& x, const std::vector<std::int64_t>& pads, PadMode mode, double value) {
  x.check_defined("pad");
  if (pads.size() % 2 != 0)
    fail("pad: the pad list must have an even length (pairs of before, after), got {} entries {}", pads.size(),
         shape_string(pads));
  if (static_cast<std::int64_t>(pads.size()) > 2 * x.dim())
    fail("pad: padding length too large: {} entries {} for an input of {} dims (shape {}), at most {}", pads.size(),
         shape_string(pads), x.dim(), shape_string(x.shape()), 2 * x.dim());
  if (mode != PadMode::Constant) return border_pad(x, pads, mode);
  Shape shape = x.shape();
  for (std::size_t k = 0; k < pads.size() / 2; ++k) {
    const auto d = shape.size() - 1 - k;
    const std::int64_t size = shape[d] + pads[2 * k] + pads[2 * k + 1];
    if (size < 0)
      fail("pad: the input size {}, plus negative padding {} and {}, resulted in a negative output size ({}) at "
           "dimension {} of input {}",
           shape[d], pads[2 * k], pads[2 * k + 1], size, d, shape_string(x.shape()));
    shape[d] = size;
  }
  return constant_pad(x, pads, shape, value);
}

}  // namespace tapegrad
