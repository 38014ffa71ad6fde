// Indexing ops and their adjoint pairs: index_select <-> index_add, gather <-> scatter_add.
// Each pair's backward is the other op, so gradients of gradients keep flowing.
#include <algorithm>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

namespace {

std::int64_t product(const Shape& shape, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= shape[i];
  return p;
}

void check_index_dtype(const Tensor& index, const char* op) {
  index.check_defined(op);
  if (index.dtype() != DType::Int64)
    fail("{}: index must be an int64 tensor, got {} of shape {}", op, dtype_name(index.dtype()),
         shape_string(index.shape()));
}

// The validated 1-D index of index_select/index_add.
const std::int64_t* vector_index(const Tensor& index, std::int64_t size, std::int64_t dim, const char* op) {
  check_index_dtype(index, op);
  if (index.dim() > 1) fail("{}: index must be 1-D, got shape {}", op, shape_string(index.shape()));
  const std::int64_t* idx = index.data<std::int64_t>();
  for (std::int64_t j = 0; j < index.numel(); ++j)
    if (idx[j] < 0 || idx[j] >= size)
      fail("{}: index {} is out of bounds for dim {} with size {}", op, idx[j], dim, size);
  return idx;
}

// Visits every element of `index` (of x's rank) as (element number, offset into x, offset into a
// tensor of index's shape is the element number itself). Checks the rank, extents and bounds first.
template <class F>
void for_each_gathered(const Tensor& x, std::int64_t dim, const Tensor& index, const char* op, F visit) {
  check_index_dtype(index, op);
  if (x.dim() == 0) fail("{}: expected a tensor with at least 1 dim", op);
  if (index.dim() != x.dim())
    fail("{}: index {} must have as many dims as the input {}", op, shape_string(index.shape()),
         shape_string(x.shape()));
  const auto d = static_cast<std::size_t>(dim);
  for (std::size_t k = 0; k < x.shape().size(); ++k)
    if (k != d && index.shape()[k] > x.shape()[k])
      fail("{}: index {} is larger than the input {} in dim {}", op, shape_string(index.shape()),
           shape_string(x.shape()), k);
  const std::int64_t n = index.numel(), size = x.shape()[d];
  if (n == 0) return;
  const Shape strides = contiguous_strides(x.shape());
  const std::int64_t* idx = index.data<std::int64_t>();
  const Shape& is = index.shape();
  std::vector<std::int64_t> at(is.size(), 0);
  std::int64_t base = 0;  // offset into x of `at` with the dim-`dim` coordinate taken as 0
  for (std::int64_t e = 0; e < n; ++e) {
    if (idx[e] < 0 || idx[e] >= size) fail("{}: index {} is out of bounds for dim {} with size {}", op, idx[e], dim, size);
    visit(e, base + idx[e] * strides[d]);
    for (std::size_t k = is.size(); k-- > 0;) {
      if (k != d) base += strides[k];
      if (++at[k] < is[k]) break;
      if (k != d) base -= strides[k] * is[k];
      at[k] = 0;
    }
  }
}

}  // namespace

Tensor index_select(const Tensor& x_in, std::int64_t dim, const Tensor& index_in) {
  const Tensor x = x_in.contiguous(), index = index_in.contiguous();
  x.check_defined("index_select");
  if (x.dim() == 0) fail("index_select: expected a tensor with at least 1 dim");
  const std::int64_t d = normalize_dim(dim, x.dim(), "index_select");
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t* idx = vector_index(index, x.shape()[ud], d, "index_select");
  Shape shape = x.shape();
  shape[ud] = index.numel();
  Tensor out = empty(shape, x.dtype());
  const std::int64_t outer = product(shape, 0, ud), inner = product(shape, ud + 1, shape.size());
  const std::int64_t in_rows = x.shape()[ud], out_rows = shape[ud];
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < out_rows; ++j)
        std::copy_n(src + (o * in_rows + idx[j]) * inner, inner, dst + (o * out_rows + j) * inner);
  });
  if (trace::active()) trace::annotate(out, {{"dim", static_cast<std::int64_t>(d)}, {"index", index}});
  return record_if_needed("index_select", out, {x}, [&] {
    return [xs = x.shape(), d, saved = SavedTensor(index, "index_select")](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{index_add(zeros(xs, TensorOptions{}.with_dtype(g.dtype())), d, saved.get(), g)};
    };
  });
}

Tensor index_add(const Tensor& x_in, std::int64_t dim, const Tensor& index_in, const Tensor& source_in) {
  const Tensor x = x_in.contiguous(), index = index_in.contiguous(), source = source_in.contiguous();
  x.check_defined("index_add");
  source.check_defined("index_add");
  // Note: refused here, by name; the dtype dispatch below would refuse without naming the op.
  if (x.dtype() == DType::BFloat16)
    fail("index_add: bfloat16 is not supported by this op: convert with .to(DType::Float32) (shape {})",
         shape_string(x.shape()));
  if (x.dim() == 0) fail("index_add: expected a tensor with at least 1 dim");
  const std::int64_t d = normalize_dim(dim, x.dim(), "index_add");
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t* idx = vector_index(index, x.shape()[ud], d, "index_add");
  Shape expected = x.shape();
  expected[ud] = index.numel();
  if (source.shape() != expected || source.dtype() != x.dtype())
    fail("index_add: source {} {} must be {} {} (input {} with dim {} of extent {})", shape_string(source.shape()),
         dtype_name(source.dtype()), shape_string(expected), dtype_name(x.dtype()), shape_string(x.shape()), d,
         index.numel());
  Tensor out = x.detach().clone();
  const std::int64_t outer = product(expected, 0, ud), inner = product(expected, ud + 1, expected.size());
  const std::int64_t out_rows = x.shape()[ud], src_rows = expected[ud];
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = source.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < src_rows; ++j) {
        T* row = dst + (o * out_rows + idx[j]) * inner;
        const T* add = src + (o * src_rows + j) * inner;
        for (std::int64_t k = 0; k < inner; ++k) row[k] += add[k];
      }
  });
  return record_if_needed("index_add", out, {x, source}, [&] {
    return [d, saved = SavedTensor(index, "index_add")](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? g : Tensor(), needs[1] ? index_select(g, d, saved.get()) : Tensor()};
    };
  });
}

Tensor gather(const Tensor& x_in, std::int64_t dim, const Tensor& index_in) {
  const Tensor x = x_in.contiguous(), index = index_in.contiguous();
  x.check_defined("gather");
  const std::int64_t d = normalize_dim(dim, x.dim(), "gather");
  Tensor out = empty(index.defined() ? index.shape() : Shape{}, x.dtype());
  detail::dispatch_moves(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for_each_gathered(x, d, index, "gather", [&](std::int64_t e, std::int64_t at) { dst[e] = src[at]; });
  });
  return record_if_needed("gather", out, {x}, [&] {
    return [xs = x.shape(), d, saved = SavedTensor(index, "gather")](const Tensor& g, NeedsGrad) {
      return std::vector<Tensor>{scatter_add(zeros(xs, TensorOptions{}.with_dtype(g.dtype())), d, saved.get(), g)};
    };
  });
}

Tensor scatter_add(const Tensor& x_in, std::int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  const Tensor x = x_in.contiguous(), index = index_in.contiguous(), src = src_in.contiguous();
  x.check_defined("scatter_add");
  src.check_defined("scatter_add");
  // Note: refused here, by name; the dtype dispatch below would refuse without naming the op.
  if (x.dtype() == DType::BFloat16)
    fail("scatter_add: bfloat16 is not supported by this op: convert with .to(DType::Float32) (shape {})",
         shape_string(x.shape()));
  check_index_dtype(index, "scatter_add");
  const std::int64_t d = normalize_dim(dim, x.dim(), "scatter_add");
  // Note: PyTorch lets src be larger than index and ignores the rest; here src must match index exactly,
  // which is all gather's backward needs and keeps scatter_add's own backward a plain gather.
  if (src.shape() != index.shape() || src.dtype() != x.dtype())
    fail("scatter_add: src {} {} must have the index's shape {} and the input's dtype {}", shape_string(src.shape()),
         dtype_name(src.dtype()), shape_string(index.shape()), dtype_name(x.dtype()));
  Tensor out = x.detach().clone();
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* from = src.data<T>();
    T* dst = out.data<T>();
    for_each_gathered(x, d, index, "scatter_add", [&](std::int64_t e, std::int64_t at) { dst[at] += from[e]; });
  });
  return record_if_needed("scatter_add", out, {x, src}, [&] {
    return [d, saved = SavedTensor(index, "scatter_add")](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? g : Tensor(), needs[1] ? gather(g, d, saved.get()) : Tensor()};
    };
  });
}

}  // namespace tapegrad
