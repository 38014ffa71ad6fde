#pragma once
// Internal: what max and average pooling share: the planes of an [N, C, H, W] input, the 3-d input as a batch of
// one, and the output size checked with PyTorch's rules.
#include <cstdint>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/ops/conv.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// Below this many inner-loop steps a pooling parallel region costs more than it saves.
inline constexpr std::int64_t kPoolParallelWork = 1 << 15;

struct Planes {
  std::int64_t count, h, w;  // N*C planes of h x w
};

inline Planes planes_of(const Shape& shape) { return {shape[0] * shape[1], shape[2], shape[3]}; }

/// Runs fn(batched input) for a 4-d input, or on a batch of one for a 3-d input, giving back 3-d results.
template <class F>
auto with_batch(const Tensor& input, const char* op, F fn) {
  input.check_defined(op);
  if (input.dim() == 4) return fn(input);
  if (input.dim() != 3)
    fail("{}: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got {}", op, shape_string(input.shape()));
  Shape batched{1};
  batched.insert(batched.end(), input.shape().begin(), input.shape().end());
  auto unbatch = [](const Tensor& t) { return t.reshape(Shape(t.shape().begin() + 1, t.shape().end())); };
  auto result = fn(input.reshape(batched));
  if constexpr (std::is_same_v<decltype(result), Tensor>)
    return unbatch(result);
  else
    return decltype(result){unbatch(result.first), unbatch(result.second)};
}

/// One dim's pooling geometry, checked with PyTorch's rules.
inline std::int64_t pooled_size(const char* op, const Tensor& input, int dim, std::int64_t kernel, std::int64_t stride,
                         std::int64_t padding, std::int64_t dilation, bool ceil_mode) {
  const std::int64_t size = input.size(dim);
  const std::int64_t span = size + 2 * padding - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = span < 0 ? 0 : span / stride + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= size + padding) --out;
  if (out < 1)
    fail("{}: input {} is too small for a kernel of {} with padding {} and dilation {} along dim {}", op,
         shape_string(input.shape()), kernel, padding, dilation, dim);
  // Note: a dilated window can step over a small input entirely (kernel 2, dilation 2, padding 1 on one
  // row). PyTorch then outputs -inf with an index outside the plane; here that is an error instead.
  for (std::int64_t i = 0; i < out; ++i) {
    bool sees_input = false;
    for (std::int64_t k = 0; k < kernel && !sees_input; ++k) {
      const std::int64_t at = i * stride - padding + k * dilation;
      sees_input = at >= 0 && at < size;
    }
    if (!sees_input)
      fail("{}: window {} along dim {} of input {} covers only padding (kernel {}, padding {}, dilation {})", op, i,
           dim, shape_string(input.shape()), kernel, padding, dilation);
  }
  return out;
}

/// The kernel taps [first, last) of each output position along one dim that land inside the input.
struct TapRange {
  std::vector<std::int64_t> first, last;
};
inline TapRange valid_taps(std::int64_t size, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                           std::int64_t padding, std::int64_t dilation) {
  TapRange r;
  for (std::int64_t i = 0; i < out; ++i) {
    std::int64_t first = 0, last = kernel;
    while (first < kernel && i * stride - padding + first * dilation < 0) ++first;
    while (last > first && i * stride - padding + (last - 1) * dilation >= size) --last;
    r.first.push_back(first);
    r.last.push_back(last);
  }
  return r;
}

struct PoolGeometry {
  std::int64_t oh, ow;
};

inline PoolGeometry check_pool(const char* op, const Tensor& input, IntPair kernel, IntPair stride, IntPair padding,
                        IntPair dilation, bool ceil_mode) {
  if (kernel.h < 1 || kernel.w < 1) fail("{}: kernel_size must be positive, got {}", op, kernel.str());
  if (stride.h < 1 || stride.w < 1) fail("{}: stride must be positive, got {}", op, stride.str());
  if (dilation.h < 1 || dilation.w < 1) fail("{}: dilation must be positive, got {}", op, dilation.str());
  if (padding.h < 0 || padding.w < 0 || padding.h > kernel.h / 2 || padding.w > kernel.w / 2)
    fail("{}: padding {} must be non-negative and at most half the kernel size {}", op, padding.str(), kernel.str());
  return {pooled_size(op, input, 2, kernel.h, stride.h, padding.h, dilation.h, ceil_mode),
          pooled_size(op, input, 3, kernel.w, stride.w, padding.w, dilation.w, ceil_mode)};
}


}  // namespace tapegrad::detail
