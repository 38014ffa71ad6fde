// Dropout: the forward draws a Bernoulli(1 - p) keep-mask (kernels/dropout_mask.h: one byte per element) and
// multiplies by 1 / (1 - p) where kept; the backward multiplies by the same scaled mask, a constant, so it is
// differentiable in g under create_graph. dropout2d draws one mask value per feature map and multiplies it in
// with a broadcasting mul. relu_dropout and add_dropout (ops/detail/dropout_fused.h) fuse dropout with the
// Transformer layers' ReLU and residual sums.
#include <tapegrad/framework/ops/detail/dropout_fused.h>
#include <tapegrad/framework/ops/dropout.h>

#include <cstdint>
#include <memory>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/kernels/dropout_mask.h>
#include <tapegrad/framework/ops/compare.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/storage.h>

namespace tapegrad {

namespace {

// Note: with p == 1 every element is dropped; the scale would be 1/0, so the kept factor is 0 instead.
double kept_scale(double p) { return p == 1.0 ? 0.0 : 1.0 / (1.0 - p); }

// The keep bytes of the next n elements of the dropout stream: one byte per element (the mask was a tensor of x's
// dtype, four or eight times the memory, kept alive until backward). From the caching allocator, like a tensor.
std::shared_ptr<Storage> draw_keep(Generator& generator, double p, std::int64_t n) {
  auto keep = std::make_shared<Storage>(static_cast<std::size_t>(n));
  kernels::DropoutStream(generator, p).next(static_cast<unsigned char*>(keep->data()), n);
  return keep;
}

// The scaled mask as a tensor of `like`'s shape and dtype (kept or 0), for the create_graph backward; the keep
// bytes are in the memory order of `format`, the forward input's.
Tensor scaled_mask(const Storage& bytes, const Tensor& like, double p,
                   MemoryFormat format = MemoryFormat::Contiguous) {
  Tensor mask = empty(like.shape(), like.dtype(), format);
  detail::dispatch_floating(like.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const auto* keep = static_cast<const unsigned char*>(bytes.data());
    T* m = mask.data<T>(format);
    const T kept = static_cast<T>(kept_scale(p));
    for (std::int64_t i = 0; i < mask.numel(); ++i) m[i] = keep[i] ? kept : T(0);
  });
  return mask;
}

void check_probability(const char* op, double p) {
  if (!(p >= 0.0 && p <= 1.0)) fail("{}: probability has to be between 0 and 1, but got {}", op, p);
}

}  // namespace

Tensor dropout(const Tensor& x_in, double p, bool training, Generator& generator) {
  x_in.check_defined("dropout");
  // Note: a channels-last input keeps its format: the mask is drawn over its dense NHWC buffer (so element
  // (n, c, h, w) draws another number than for a row-major input; both are Bernoulli(1 - p) per element).
  const MemoryFormat format = detail::dense_format(x_in);
  const Tensor x = x_in.contiguous(format);
  check_probability("dropout", p);
  if (!training || p == 0.0) return x;
  Tensor out = empty(x.shape(), x.dtype(), format);
  // Note: each 64-bit draw decides two elements: an element is dropped when its 32-bit half is below p * 2^32
  // (p resolved to 2^-32), the stream every version of this op has drawn.
  const std::shared_ptr<Storage> keep = draw_keep(generator, p, x.numel());
  detail::dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    kernels::apply_keep(x.numel(), x.data<T>(format), static_cast<const unsigned char*>(keep->data()),
                        static_cast<T>(kept_scale(p)), out.data<T>(format));
  });
  return record_if_needed("dropout", out, {x}, [&] {
    return [keep, p, format](const Tensor& g, NeedsGrad) {
      if (is_grad_enabled()) return std::vector<Tensor>{mul(g, scaled_mask(*keep, g, p, format))};
      const Tensor gc = detail::values_in_format(g, format);
      Tensor dx = empty(gc.shape(), gc.dtype(), format);
      detail::dispatch_floating(gc.dtype(), "dropout", [&](auto tag) {
        using T = decltype(tag);
        kernels::apply_keep(gc.numel(), gc.data<T>(format), static_cast<const unsigned char*>(keep->data()),
                            static_cast<T>(kept_scale(p)), dx.data<T>(format));
      });
      return std::vector<Tensor>{dx};
    };
  });
}

Tensor detail::relu_dropout(const Tensor& x_in, double p, Generator& generator) {
  const Tensor x = x_in.contiguous();
  x.check_defined("relu_dropout");
  check_probability("relu_dropout", p);
  if (!is_floating(x.dtype())) fail("relu_dropout: expected a float input, got {}", dtype_name(x.dtype()));
  Tensor out = empty(x.shape(), x.dtype());
  const std::shared_ptr<Storage> keep = draw_keep(generator, p, x.numel());
  // Note: the keep bytes become flags in place (bit 0 kept, bit 1 where ReLU passes the gradient).
  auto* flags = static_cast<unsigned char*>(keep->data());
  detail::dispatch_floating(x.dtype(), "relu_dropout", [&](auto tag) {
    using T = decltype(tag);
    kernels::relu_keep(x.numel(), x.data<T>(), flags, static_cast<T>(kept_scale(p)), out.data<T>(), flags);
  });
  return record_if_needed("relu_dropout", out, {x}, [&] {
    return [keep, p](const Tensor& g, NeedsGrad) {
      const Tensor gc = g.contiguous();
      if (!is_grad_enabled()) {
        Tensor dx = empty(gc.shape(), gc.dtype());
        detail::dispatch_floating(gc.dtype(), "relu_dropout", [&](auto tag) {
          using T = decltype(tag);
          kernels::relu_keep_backward(gc.numel(), gc.data<T>(), static_cast<const unsigned char*>(keep->data()),
                                      static_cast<T>(kept_scale(p)), dx.data<T>());
        });
        return std::vector<Tensor>{dx};
      }
      // create_graph: g times a constant factor (kept or 0), with 0 where ReLU blocks the gradient even for an
      // infinite g (relu_backward's rule, where the product would give NaN): differentiable in g.
      Tensor factor = empty(gc.shape(), gc.dtype()), blocked = empty(gc.shape(), gc.dtype());
      detail::dispatch_floating(gc.dtype(), "relu_dropout", [&](auto tag) {
        using T = decltype(tag);
        const auto* f = static_cast<const unsigned char*>(keep->data());
        T *pf = factor.data<T>(), *pb = blocked.data<T>();
        const T kept = static_cast<T>(kept_scale(p));
        for (std::int64_t i = 0; i < factor.numel(); ++i) {
          pf[i] = (f[i] & 1) ? kept : T(0);
          pb[i] = (f[i] & 2) ? T(0) : T(1);
        }
      });
      return std::vector<Tensor>{masked_fill(mul(g, factor), blocked, 0.0)};
    };
  });
}

Tensor detail::add_dropout(const Tensor& residual_in, const Tensor& branch_in, double p, Generator& generator) {
  const Tensor residual = residual_in.contiguous(), branch = branch_in.contiguous();
  residual.check_defined("add_dropout");
  branch.check_defined("add_dropout");
  check_probability("add_dropout", p);
  if (residual.shape() != branch.shape() || residual.dtype() != branch.dtype() || !is_floating(branch.dtype()))
    fail("add_dropout: residual {} {} and branch {} {} must be float tensors of one shape and dtype",
         shape_string(residual.shape()), dtype_name(residual.dtype()), shape_string(branch.shape()),
         dtype_name(branch.dtype()));
  Tensor out = empty(branch.shape(), branch.dtype());
  const std::shared_ptr<Storage> keep = draw_keep(generator, p, branch.numel());
  detail::dispatch_floating(branch.dtype(), "add_dropout", [&](auto tag) {
    using T = decltype(tag);
    kernels::add_keep(branch.numel(), residual.data<T>(), branch.data<T>(),
                      static_cast<const unsigned char*>(keep->data()), static_cast<T>(kept_scale(p)), out.data<T>());
  });
  return record_if_needed("add_dropout", out, {residual, branch}, [&] {
    return [keep, p](const Tensor& g, NeedsGrad needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) grads[0] = g;
      if (!needs[1]) return grads;
      if (is_grad_enabled()) {
        grads[1] = mul(g, scaled_mask(*keep, g, p));
        return grads;
      }
      const Tensor gc = g.contiguous();
      grads[1] = empty(gc.shape(), gc.dtype());
      detail::dispatch_floating(gc.dtype(), "add_dropout", [&](auto tag) {
        using T = decltype(tag);
        kernels::apply_keep(gc.numel(), gc.data<T>(), static_cast<const unsigned char*>(keep->data()),
                            static_cast<T>(kept_scale(p)), grads[1].template data<T>());
      });
      return grads;
    };
  });
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator& generator) {
  x.check_defined("dropout2d");
  check_probability("dropout2d", p);
  if (x.dim() != 3 && x.dim() != 4)
    fail("dropout2d: expected a 4-d input [N, C, H, W] or a 3-d input [C, H, W], got {}", shape_string(x.shape()));
  if (!is_floating(x.dtype())) fail("dropout2d: expected a float input, got {}", dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  // One mask value per (sample, channel), broadcast over the map: [N, C, 1, 1] (or [C, 1, 1]).
  Shape mask_shape(x.shape().begin(), x.shape().end() - 2);
  mask_shape.push_back(1);
  mask_shape.push_back(1);
  Tensor mask = empty(mask_shape, x.dtype());
  // The same draw as dropout's: a map is dropped when its 32-bit half of a 64-bit draw is below p * 2^32.
  const std::shared_ptr<Storage> keep = draw_keep(generator, p, mask.numel());
  return mul(x, scaled_mask(*keep, mask, p));
}

}  // namespace tapegrad
