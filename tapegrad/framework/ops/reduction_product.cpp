// prod, count_nonzero and the int64 sum: the reductions whose kernels are not sum_to's.
#include <cstdint>
#include <type_traits>
#include <vector>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/reduce.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/ops/detail/integer_sum.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>

namespace tapegrad {

namespace {

// Note: int64 sums and products wrap modulo 2^64, as PyTorch's do; the arithmetic runs on uint64 because
// signed overflow is undefined behaviour in C++, while the unsigned result converts back to the same bits.
std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}

Tensor reduced_empty(const detail::ReducePlan& plan, bool keepdim, DType dtype) {
  return empty(keepdim ? plan.keep : plan.out, dtype);
}

// The product of each reduced group, in x's dtype (float accumulators are double, rounded once).
Tensor product_kernel(const Tensor& x_in, const detail::ReducePlan& plan, bool keepdim) {
  const Tensor x = detail::contiguous_values(x_in);
  Tensor out = reduced_empty(plan, keepdim, x.dtype());
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const auto m = static_cast<std::size_t>(out.numel());
    if constexpr (std::is_same_v<T, std::int64_t>) {
      std::fill(o, o + m, std::int64_t{1});
      detail::for_each_reduced(x.data<T>(), x.shape(), plan.keep, [o](std::int64_t j, T v) { o[j] = wrapping_mul(o[j], v); });
    } else {
      std::vector<double> acc(m, 1.0);
      detail::for_each_reduced(x.data<T>(), x.shape(), plan.keep, [&acc](std::int64_t j, T v) { acc[j] *= v; });
      for (std::size_t j = 0; j < m; ++j) o[j] = static_cast<T>(acc[j]);
    }
  });
  return out;
}

// For every element, the product of the other elements of its group (shape of x): the first-order gradient
// of prod. Without zeros it is prod / x; a group with one zero gives the product of the rest at the zero and
// 0 elsewhere; two or more zeros give 0 everywhere (PyTorch's prod_backward does the same case split).
Tensor product_of_others(const Tensor& x_in, const detail::ReducePlan& plan) {
  const Tensor x = detail::contiguous_values(x_in);
  Tensor out = empty(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), "prod", [&](auto tag) {
    using T = decltype(tag);
    const auto m = static_cast<std::size_t>(shape_numel(plan.keep));
    std::vector<double> nonzero_product(m, 1.0);
    std::vector<std::int64_t> zeros(m, 0);
    const T* in = x.data<T>();
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) {
      if (v == T(0)) ++zeros[j];
      else nonzero_product[j] *= v;
    });
    // for_each_reduced visits x in row-major order, so a running counter is each value's own position
    T* o = out.data<T>();
    std::int64_t i = 0;
    detail::for_each_reduced(in, x.shape(), plan.keep, [&](std::int64_t j, T v) {
      double others = 0.0;
      if (zeros[j] == 0) others = nonzero_product[j] / v;
      else if (zeros[j] == 1 && v == T(0)) others = nonzero_product[j];
      o[i++] = static_cast<T>(others);
    });
  });
  return out;
}

Tensor prod_over(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  // Note: refused here, by name; product_kernel's dtype dispatch would refuse without naming the op.
  if (x.defined() && x.dtype() == DType::BFloat16)
    fail("prod: bfloat16 is not supported by this op: convert with .to(DType::Float32) (shape {})",
         shape_string(x.shape()));
  const detail::ReducePlan plan = detail::plan_reduction(x.shape(), dims, "prod");
  Tensor out = product_kernel(x, plan, keepdim);
  if (!is_floating(x.dtype())) return out;
  return record_if_needed("prod", out, {x}, [&] {
    return [sx = SavedTensor(x, "prod"), plan](const Tensor& g, NeedsGrad) {
      const Tensor& v = sx.get();
      const Tensor gk = g.reshape(plan.keep);
      // Note: under create_graph the gradient must itself be differentiable in x, so without zeros it is
      // composed from recorded ops as prod / x. That formula has no value where x is 0: there the exact
      // first-order gradient is recorded with a backward that refuses, so only a second derivative fails.
      if (!is_grad_enabled() || count_nonzero(v).item<std::int64_t>() != v.numel()) {
        Tensor others = product_of_others(v, plan);
        others = record_if_needed("prod_backward", others, {v}, [xs = v.shape()] {
          return [xs](const Tensor&, NeedsGrad) -> std::vector<Tensor> {
            fail("prod: double backward through an input holding 0 is not supported (shape {})", shape_string(xs));
          };
        });
        return std::vector<Tensor>{mul(gk, others)};
      }
      return std::vector<Tensor>{mul(gk, div(prod_over(v, plan.dims, /*keepdim=*/true), v))};
    };
  });
}

}  // namespace

Tensor prod(const Tensor& x) {
  x.check_defined("prod");
  return prod_over(x, detail::all_dims(x.dim()), false);
}

Tensor prod(const Tensor& x, std::int64_t dim, bool keepdim) {
  x.check_defined("prod");
  return prod_over(x, {dim}, keepdim);
}

Tensor count_nonzero(const Tensor& x) {
  x.check_defined("count_nonzero");
  return count_nonzero(x, detail::all_dims(x.dim()));
}

Tensor count_nonzero(const Tensor& x_in, const std::vector<std::int64_t>& dims) {
  x_in.check_defined("count_nonzero");
  const detail::ReducePlan plan = detail::plan_reduction(x_in.shape(), dims, "count_nonzero");
  const Tensor x = detail::contiguous_values(x_in);
  Tensor out = zeros(plan.out, TensorOptions{}.with_dtype(DType::Int64));
  std::int64_t* o = out.data<std::int64_t>();
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    detail::for_each_reduced(x.data<T>(), x.shape(), plan.keep, [o](std::int64_t j, T v) { o[j] += v != T(0); });
  });
  return out;
}

namespace detail {

Tensor integer_sum(const Tensor& x_in, const std::vector<std::int64_t>& dims, bool keepdim) {
  const detail::ReducePlan plan = detail::plan_reduction(x_in.shape(), dims, "sum");
  const Tensor x = detail::contiguous_values(x_in);
  Tensor out = zeros(keepdim ? plan.keep : plan.out, TensorOptions{}.with_dtype(DType::Int64));
  std::int64_t* o = out.data<std::int64_t>();
  detail::for_each_reduced(x.data<std::int64_t>(), x.shape(), plan.keep,
                           [o](std::int64_t j, std::int64_t v) { o[j] = wrapping_add(o[j], v); });
  return out;
}

}  // namespace detail

}  // namespace tapegrad
