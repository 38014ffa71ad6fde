#pragma once
// Internal: the autocast (bfloat16) forms of matmul, linear and conv2d. The public ops (ops/linalg.cpp,
// ops/conv.cpp) check their arguments as always and hand over here when autocast_applies(); these compute in
// bfloat16 with float32 accumulation (kernels/gemm.h gemm_bf16, kernels/conv2d_bf16.h), return float32 and record
// their own backward, which multiplies the rounded operands saved at forward time by the rounded gradient.
#include <cstdint>
#include <initializer_list>
#include <memory>

#include <tapegrad/framework/autocast.h>
#include <tapegrad/framework/kernels/conv2d.h>
#include <tapegrad/framework/shape.h>
#include <tapegrad/framework/storage.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// True when an enabled AutocastGuard is active on this thread and every defined tensor is float32 (as in
/// PyTorch, float64 and integer inputs are never autocast).
bool autocast_applies(std::initializer_list<Tensor> tensors);

/// A float32 tensor's values rounded to bfloat16 (round to nearest even), as raw bits in storage of its own.
/// Note: what the autocast ops save for backward: half the bytes of the float32 input, and immune to later
/// in-place writes to that input (it is a copy).
class Bf16Values {
 public:
  Bf16Values() = default;
  /// Rounds `values` (any layout; read through contiguous(format)), stored in `format`'s order: row-major, or NHWC
  /// for MemoryFormat::ChannelsLast.
  explicit Bf16Values(const Tensor& values, MemoryFormat format = MemoryFormat::Contiguous);
  const std::uint16_t* data() const { return static_cast<const std::uint16_t*>(storage_->data()); }
  const Shape& shape() const { return shape_; }
  MemoryFormat format() const { return format_; }
  std::int64_t numel() const { return shape_numel(shape_); }
  /// The rounded values widened back to a float32 tensor in format() (exact).
  Tensor widened() const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  MemoryFormat format_ = MemoryFormat::Contiguous;
};

/// matmul(a, b) in bfloat16: a, b already checked by matmul; a2 and b2 are their >= 2-d matrix shapes (a's batch
/// folded into its rows when b2 is one matrix) and out_shape the result's shape, as matmul computed them.
/// The message backward(create_graph=true) refuses an autocast product with: "matmul", "linear" or "conv2d".
/// Note: a literal, because the tape keeps the pointer (autograd/detail/first_order_only.h).
const char* autocast_create_graph_refusal(const char* op);

/// Marks the record that produced `recorded` first-order only, so backward(create_graph=true) refuses the graph
/// before it deposits any gradient; returns `recorded`.
Tensor first_order_only(Tensor recorded, const char* op);

Tensor autocast_matmul(const Tensor& a, const Tensor& b, const Shape& a2, const Shape& b2, const Shape& out_shape);
/// linear(x, weight, bias) in bfloat16 (arguments contiguous and checked by linear); bias added in float32.
Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
/// conv2d of a 4-d input in bfloat16 (arguments checked by conv2d, `g` their geometry); bias added in float32. The
/// input, output and input gradient are channels-last when g.channels_last (the input is then dense NHWC), else
/// row-major.
Tensor autocast_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const kernels::ConvGeometry& g);

}  // namespace tapegrad::detail
