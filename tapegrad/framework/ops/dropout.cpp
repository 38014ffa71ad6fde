// Dropout: the forward draws a Bernoulli(1 - p) keep-mask and folds the 1 / (1 - p) scale into it; the
// backward multiplies by that same scaled mask, a constant, so it is differentiable in g under create_graph.
// dropout2d draws one mask value per feature map and multiplies it in with a broadcasting mul.
#include <tapegrad/framework/ops/dropout.h>

#include <cstdint>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/ops/elementwise.h>

namespace tapegrad {

Tensor dropout(const Tensor& x_in, double p, bool training, Generator& generator) {
  const Tensor x = x_in.contiguous();
  x.check_defined("dropout");
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout: probability has to be between 0 and 1, but got {}", p);
  if (!training || p == 0.0) return x;
  // Note: with p == 1 every element is dropped; the scale would be 1/0, so the mask is all zeros instead.
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor mask = empty(x.shape(), x.dtype());
  Tensor out = empty(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* pm = mask.data<T>();
    T* po = out.data<T>();
    const T kept = static_cast<T>(scale);
    // Note: the mask is the generator's hot loop, so each 64-bit draw decides two elements: an element is
    // dropped when its 32-bit half is below p * 2^32 (p resolved to 2^-32).
    auto& engine = generator.engine();
    const double cut = p * 4294967296.0;
    const std::int64_t n = x.numel();
    std::uint64_t bits = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if ((i & 1) == 0) bits = engine();
      const auto half = static_cast<double>((i & 1) ? bits >> 32 : bits & 0xffffffffu);
      pm[i] = half < cut ? T(0) : kept;
      po[i] = px[i] * pm[i];
    }
  });
  return record_if_needed("dropout", out, {x}, [&] {
    return [scaled_mask = SavedTensor(mask, "dropout")](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{mul(g, scaled_mask.get())};
    };
  });
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator& generator) {
  x.check_defined("dropout2d");
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout2d: probability has to be between 0 and 1, but got {}", p);
  if (x.dim() != 3 && x.dim() != 4)
    fail("dropout2d: expected a 4-d input [N, C, H, W] or a 3-d input [C, H, W], got {}", shape_string(x.shape()));
  if (!is_floating(x.dtype())) fail("dropout2d: expected a float input, got {}", dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  // One mask value per (sample, channel), broadcast over the map: [N, C, 1, 1] (or [C, 1, 1]).
  Shape mask_shape(x.shape().begin(), x.shape().end() - 2);
  mask_shape.push_back(1);
  mask_shape.push_back(1);
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor mask = empty(mask_shape, x.dtype());
  detail::dispatch_floating(x.dtype(), "dropout2d", [&](auto tag) {
    using T = decltype(tag);
    T* pm = mask.data<T>();
    // The same draw as dropout's: a map is dropped when its 32-bit half of a 64-bit draw is below p * 2^32.
    auto& engine = generator.engine();
    const double cut = p * 4294967296.0;
    std::uint64_t bits = 0;
    for (std::int64_t i = 0; i < mask.numel(); ++i) {
      if ((i & 1) == 0) bits = engine();
      const auto half = static_cast<double>((i & 1) ? bits >> 32 : bits & 0xffffffffu);
      pm[i] = half < cut ? T(0) : static_cast<T>(scale);
    }
  });
  return mul(x, mask);
}

}  // namespace tapegrad
