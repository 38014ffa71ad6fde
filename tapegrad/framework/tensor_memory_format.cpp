// Memory formats on the Tensor handle: the layout rules (PyTorch 1.13's c10 rules, checked against torch by
// tests/reference/make_channels_last_reference.py), the format-checked data pointers and the format-aware
// factories. Tensor::contiguous(MemoryFormat) records on the tape, so it is an op (ops/tensor_memory_format.cpp).
#include <tapegrad/framework/detail/memory_format.h>

#include <algorithm>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/plane_transpose.h>
#include <tapegrad/framework/detail/strided.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

namespace detail {

Shape channels_last_strides(const Shape& shape) {
  if (shape.size() != 4) fail("channels_last: expected a 4-d [N, C, H, W] shape, got {}", shape_string(shape));
  const std::int64_t c = shape[1], h = shape[2], w = shape[3];
  // Note: as PyTorch's get_channels_last_strides_2d, a dim of extent 0 counts as 1 here, so that the strides
  // stay distinct and positive.
  const std::int64_t c1 = std::max<std::int64_t>(c, 1), w1 = std::max<std::int64_t>(w, 1),
                     h1 = std::max<std::int64_t>(h, 1);
  return {h1 * w1 * c1, 1, w1 * c1, c1};
}

bool is_channels_last_layout(const Shape& shape, const Shape& strides) {
  if (shape.size() != 4) return false;
  const Shape& s = strides.size() == 4 ? strides : contiguous_strides(shape);
  std::int64_t expected = 1;
  for (std::size_t d : {1u, 3u, 2u, 0u}) {
    if (shape[d] == 1) continue;
    if (s[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool has_channels_last_strides(const Shape& shape, const Shape& strides) {
  if (shape.size() != 4) return false;
  const Shape& s = strides.size() == 4 ? strides : contiguous_strides(shape);
  // A broadcast channel dim: default to NCHW, as PyTorch.
  if (s[1] == 0) return false;
  std::int64_t min = 0;
  for (std::size_t d : {1u, 3u, 2u, 0u}) {
    if (shape[d] == 0) return false;
    if (s[d] < min) return false;
    // Note: PyTorch's fallback for N111 tensors whose strides are all equal (a contiguous [N,1,1,1], or an N11W
    // tensor sliced along W): row-major, the default, wins the tie.
    if (d == 0 && min == s[1]) return false;
    // Multiplying by the extent tells N1H1 channels-last [H,1,1,1] from contiguous [H,H,1,1], and keeps a
    // transposed 1C1W tensor from counting as channels-last.
    min = s[d];
    if (shape[d] > 1) min *= shape[d];
  }
  return true;
}

bool is_strictly_channels_last(const Tensor& t) {
  return t.defined() && !t.impl()->contiguous && is_channels_last_layout(t.impl()->shape, t.impl()->strides);
}

MemoryFormat elementwise_output_format(std::initializer_list<const Tensor*> operands, const Shape& out_shape) {
  if (out_shape.size() != 4) return MemoryFormat::Contiguous;
  // TensorIterator's fast set-up: operands all of the output's shape, all row-major (even if also channels-last)
  // give row-major; all channels-last give channels-last.
  // Note: the row-major case, by far the commonest, is decided first, with one load per operand.
  bool same_shape = true, all_contiguous = true;
  for (const Tensor* t : operands) {
    same_shape = same_shape && t->shape() == out_shape;
    all_contiguous = all_contiguous && t->is_contiguous();
  }
  if (same_shape && all_contiguous) return MemoryFormat::Contiguous;
  bool all_channels_last = true;
  for (const Tensor* t : operands)
    all_channels_last = all_channels_last && t->is_contiguous(MemoryFormat::ChannelsLast);
  if (same_shape && all_channels_last) return MemoryFormat::ChannelsLast;
  // Otherwise TensorIterator's reorder_dimensions: an insertion sort of the dims, fastest first, where the first
  // operand whose strides along the two dims are both non-zero (not broadcast) and differ decides; equal strides
  // put the smaller extent first.
  std::vector<Shape> strides;
  for (const Tensor* t : operands) {
    const Shape own = t->strides();
    Shape s(4, 0);
    const std::size_t lead = 4 - own.size();
    for (std::size_t d = 0; d < own.size(); ++d)
      s[lead + d] = (t->shape()[d] == 1 && out_shape[lead + d] != 1) ? 0 : own[d];
    strides.push_back(std::move(s));
  }
  auto should_swap = [&](std::size_t dim0, std::size_t dim1) {
    for (const Shape& s : strides) {
      if (s[dim0] == 0 || s[dim1] == 0) continue;
      if (s[dim0] < s[dim1]) return -1;
      if (s[dim0] > s[dim1]) return 1;
      if (out_shape[dim0] > out_shape[dim1]) return 1;
    }
    return 0;
  };
  std::size_t perm[4] = {3, 2, 1, 0};
  for (std::size_t i = 1; i < 4; ++i) {
    std::size_t dim1 = i;
    for (std::size_t dim0 = i; dim0-- > 0;) {
      const int comparison = should_swap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  // The output is dense in that order; it counts as channels-last when those strides are channels-last and not
  // also row-major.
  Shape out_strides(4, 0);
  std::int64_t step = 1;
  for (std::size_t d : perm) {
    out_strides[d] = step;
    step *= out_shape[d];
  }
  return is_channels_last_layout(out_shape, out_strides) && !is_contiguous_layout(out_shape, out_strides)
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

Shape nhwc_shape(const Shape& shape) {
  if (shape.size() > 4) fail("channels_last: expected at most 4 dims, got shape {}", shape_string(shape));
  Shape padded(4 - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  return {padded[0], padded[2], padded[3], padded[1]};
}

Tensor nhwc_operand(const Tensor& t) {
  if (t.dim() == 4) return channels_last_values(t);
  const Shape own = t.strides();
  Shape shape(4 - own.size(), 1), strides(4 - own.size(), 1);
  shape.insert(shape.end(), t.shape().begin(), t.shape().end());
  strides.insert(strides.end(), own.begin(), own.end());
  return channels_last_values(make_view(t, shape, strides, t.storage_offset()));
}

Tensor empty_in_format(const Shape& shape, DType dtype, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return empty(shape, dtype);
  if (format != MemoryFormat::ChannelsLast)
    fail("empty: memory format {} needs a tensor to take the format from (use empty_like)", memory_format_name(format));
  if (shape.size() != 4)
    fail("empty: memory format ChannelsLast needs a 4-d [N, C, H, W] shape, got {}", shape_string(shape));
  Tensor t = empty(shape, dtype);
  // Note: set even where these strides are also row-major (C == 1, or H == W == 1): the size-1 dims' strides
  // are what suggest_memory_format reads, and PyTorch's empty(channels_last) sets them too.
  t.impl()->set_layout(shape, channels_last_strides(shape), 0);
  return t;
}

Tensor channels_last_values(const Tensor& t) {
  if (t.dim() != 4)
    fail("contiguous: memory format ChannelsLast needs a 4-d [N, C, H, W] tensor, got shape {}",
         shape_string(t.shape()));
  if (t.is_contiguous(MemoryFormat::ChannelsLast)) return t;
  const TensorImpl& from = *t.impl();
  const Shape strides = t.strides();
  Tensor out = empty_in_format(from.shape, from.dtype, MemoryFormat::ChannelsLast);
  // The NHWC array is the row-major walk of the [N, H, W, C] permutation of t's layout.
  const Shape nhwc_shape{from.shape[0], from.shape[2], from.shape[3], from.shape[1]};
  const Shape nhwc_strides{strides[0], strides[2], strides[3], strides[1]};
  // Note: only moves elements, so bfloat16 converts too (as PyTorch's does).
  dispatch_moves(from.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(from.storage->data());
    T* dst = static_cast<T*>(out.raw_data(MemoryFormat::ChannelsLast));
    // A dense row-major tensor (the common case: an input batch, a row-major op's output) converts as a transpose
    // of each sample's [C, H*W] plane (detail/plane_transpose.h says why).
    if (from.contiguous)
      return transpose_planes(src + from.offset, dst, from.shape[0], from.shape[1], from.shape[2] * from.shape[3]);
    for_each_run(nhwc_shape, nhwc_strides, from.offset,
                 [&](std::int64_t o, std::int64_t s, std::int64_t inner, std::int64_t step) {
                   for (std::int64_t k = 0; k < inner; ++k) dst[o + k] = src[s + k * step];
                 });
  });
  return out;
}

Tensor values_in_format(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast) return channels_last_values(t);
  if (format == MemoryFormat::Contiguous) return contiguous_values(t);
  fail("contiguous: memory format Preserve is not a layout (shape {})", shape_string(t.shape()));
}

}  // namespace detail

namespace {
[[noreturn]] void fail_not_in_format(const Tensor& t, MemoryFormat format, const char* op) {
  fail("{}: the tensor of shape {} (strides {}, storage offset {}) is not contiguous in memory format {}; call "
       "contiguous(MemoryFormat::{}) first",
       op, shape_string(t.shape()), shape_string(t.strides()), t.storage_offset(), memory_format_name(format),
       memory_format_name(format));
}
}  // namespace

bool Tensor::is_contiguous(MemoryFormat format) const {
  check_defined("is_contiguous");
  switch (format) {
    case MemoryFormat::Contiguous: return impl_->contiguous;
    case MemoryFormat::ChannelsLast: return detail::is_channels_last_layout(impl_->shape, impl_->strides);
    case MemoryFormat::Preserve: break;
  }
  fail("is_contiguous: memory format Preserve is not a layout (shape {})", shape_string(shape()));
}

MemoryFormat Tensor::suggest_memory_format() const {
  check_defined("suggest_memory_format");
  return detail::has_channels_last_strides(impl_->shape, impl_->strides) ? MemoryFormat::ChannelsLast
                                                                         : MemoryFormat::Contiguous;
}

template <class T>
T* Tensor::data(MemoryFormat format) {
  if (!is_contiguous(format)) fail_not_in_format(*this, format, "data");
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  return static_cast<T*>(impl_->storage->data()) + impl_->offset;
}
template <class T>
const T* Tensor::data(MemoryFormat format) const {
  if (!is_contiguous(format)) fail_not_in_format(*this, format, "data");
  if (dtype() != dtype_of<T>())
    fail("data: tensor holds {}, asked for {}", dtype_name(dtype()), dtype_name(dtype_of<T>()));
  return static_cast<const T*>(impl_->storage->data()) + impl_->offset;
}
template float* Tensor::data<float>(MemoryFormat);
template double* Tensor::data<double>(MemoryFormat);
template std::int64_t* Tensor::data<std::int64_t>(MemoryFormat);
template const float* Tensor::data<float>(MemoryFormat) const;
template const double* Tensor::data<double>(MemoryFormat) const;
template const std::int64_t* Tensor::data<std::int64_t>(MemoryFormat) const;
template BFloat16* Tensor::data<BFloat16>(MemoryFormat);
template const BFloat16* Tensor::data<BFloat16>(MemoryFormat) const;

void* Tensor::raw_data(MemoryFormat format) {
  if (!is_contiguous(format)) fail_not_in_format(*this, format, "raw_data");
  return static_cast<unsigned char*>(impl_->storage->data()) +
         static_cast<std::size_t>(impl_->offset) * element_size(impl_->dtype);
}
const void* Tensor::raw_data(MemoryFormat format) const {
  if (!is_contiguous(format)) fail_not_in_format(*this, format, "raw_data");
  return static_cast<const unsigned char*>(impl_->storage->data()) +
         static_cast<std::size_t>(impl_->offset) * element_size(impl_->dtype);
}

Tensor empty(const Shape& shape, DType dtype, MemoryFormat format) {
  return detail::empty_in_format(shape, dtype, format);
}

Tensor empty_like(const Tensor& like, MemoryFormat format) {
  like.check_defined("empty_like");
  if (format == MemoryFormat::Preserve)
    format = detail::is_strictly_channels_last(like) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  return detail::empty_in_format(like.shape(), like.dtype(), format);
}

}  // namespace tapegrad
