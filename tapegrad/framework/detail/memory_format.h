#pragma once
// Internal: layout rules of the memory formats (PyTorch 1.13's c10 rules) and the unrecorded conversions that
// ops use on their raw-pointer paths.
#include <cstdint>
#include <initializer_list>

#include <tapegrad/framework/memory_format.h>
#include <tapegrad/framework/shape.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// Strides of a dense NHWC array viewed as the 4-d NCHW `shape`: [H*W*C, 1, W*C, C].
Shape channels_last_strides(const Shape& shape);
/// PyTorch's is_contiguous(channels_last): a 4-d layout whose strides, walked C, W, H, N and skipping dims of
/// extent 1, are those of a dense NHWC array. Dims of extent 1 may have any stride; empty strides are row-major.
bool is_channels_last_layout(const Shape& shape, const Shape& strides);
/// PyTorch's is_channels_last_strides_2d (the rule behind suggest_memory_format): the strides order the dims
/// C, W, H, N from fastest to slowest, with PyTorch's tie-breaks that fall back to row-major when ambiguous.
bool has_channels_last_strides(const Shape& shape, const Shape& strides);
/// True when `t` is channels-last-contiguous and not also row-major: the tensors that ops keeping the format
/// run on as a dense buffer and give a channels-last result.
bool is_strictly_channels_last(const Tensor& t);
/// The dense layout an elementwise op runs `t` in: ChannelsLast when is_strictly_channels_last(t), else
/// Contiguous (a strided view is then copied to row-major first).
inline MemoryFormat dense_format(const Tensor& t) {
  return is_strictly_channels_last(t) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}
/// PyTorch's TensorIterator rule for the output of an elementwise op over `operands` (broadcast to
/// `out_shape`): ChannelsLast when the operands' strides, compared first operand first and skipping broadcast
/// dims, order a 4-d output's dims as NHWC; Contiguous otherwise (also where PyTorch would give another permuted
/// layout: tapegrad's elementwise results are row-major or channels-last).
MemoryFormat elementwise_output_format(std::initializer_list<const Tensor*> operands, const Shape& out_shape);
/// The values of `t` (broadcastable to a 4-d shape) as a dense NHWC array: `t` padded with leading dims of
/// extent 1 to 4-d and laid out channels-last (no copy when already so). Read it with the shape `nhwc_shape`.
Tensor nhwc_operand(const Tensor& t);
/// [N, H, W, C] for a 4-d [N, C, H, W] shape (or for fewer dims, padded with leading 1s first).
Shape nhwc_shape(const Shape& shape);
/// An uninitialised tensor of `shape` laid out like `format` (Preserve is refused here).
Tensor empty_in_format(const Shape& shape, DType dtype, MemoryFormat format);
/// `t` itself when already channels-last-contiguous, else a fresh channels-last copy of its values (unrecorded).
Tensor channels_last_values(const Tensor& t);
/// `t` in `format` (Contiguous or ChannelsLast) without recording: contiguous_values or channels_last_values.
Tensor values_in_format(const Tensor& t, MemoryFormat format);

}  // namespace tapegrad::detail
