// matmul, linear, bmm and baddbmm (the last two are checked matmuls). Both forward kernels are GEMMs (framework/kernels/gemm.h) over row-major storage (matmul
// also reads transposed and sliced views in place); both backward rules have a raw-GEMM first-order path and a differentiable path for create_graph.
#include <tapegrad/framework/ops/linalg.h>

#include <algorithm>

#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/broadcast.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/kernels/column_sums.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/ops/detail/autocast.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad {

namespace {

// A handle on the same values with another shape that records nothing (for kernels and closures).
Tensor raw_view(const Tensor& t, const Shape& shape) { return t.detach().reshape(shape); }

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// How GEMM reads one operand in place: its matrices are row-major with leading dimension `ld`, transposed
// when `transposed`, and the matrix of batch index i starts at `offset` + sum(i_d * batch_strides[d]).
struct GemmOperand {
  Tensor values;  // the tensor read (the operand itself, or its contiguous copy)
  bool transposed;
  std::int64_t ld, offset;
  Shape batch_strides;  // over the output's batch dims, 0 where broadcast
};

// A transposed or otherwise strided view is read where it lies when its last two dims are a row-major or a
// column-major matrix (a transposed one to GEMM): `x.matmul(w.t())` copies nothing, as in libtorch. Other
// layouts (expanded or sliced with a step in both dims) are made contiguous first.
GemmOperand gemm_operand(const Tensor& t, bool transpose, const Shape& batch) {
  Tensor values = t;
  const auto layout = [&](const Tensor& v, bool& transposed, std::int64_t& ld) {
    const Shape &s = v.shape(), st = v.strides();
    const std::int64_t rows = s[s.size() - 2], cols = s.back(), sr = st[st.size() - 2], sc = st.back();
    if (rows == 0 || cols == 0) return false;
    if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
      transposed = transpose;
      ld = rows == 1 ? cols : sr;
      return true;
    }
    if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {  // column-major: the transpose is row-major
      transposed = !transpose;
      ld = cols == 1 ? rows : sc;
      return true;
    }
    return false;
  };
  bool transposed = transpose;
  std::int64_t ld = 0;
  if (!layout(values, transposed, ld)) {
    values = t.contiguous();
    transposed = transpose;
    ld = std::max<std::int64_t>(1, values.shape().back());
  }
  const Shape &s = values.shape(), st = values.strides();
  Shape batch_strides(batch.size(), 0);
  const std::size_t own = s.size() - 2, shift = batch.size() - own;
  for (std::size_t d = 0; d < own; ++d) batch_strides[shift + d] = s[d] == 1 ? 0 : st[d];
  return {values, transposed, ld, values.storage_offset(), batch_strides};
}

// op(a) x op(b) for a, b of at least 2 dims, where op transposes the last two dims when asked; the batch
// dims broadcast. Records nothing: the callers own the tape record.
// Note: the output is always a fresh tensor, so no operand can alias it.
Tensor batched_product(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b) {
  const Shape &as = a.shape(), &bs = b.shape();
  const std::int64_t a_rows = as[as.size() - 2], a_cols = as.back(), b_rows = bs[bs.size() - 2], b_cols = bs.back();
  const std::int64_t n = transpose_a ? a_cols : a_rows, k = transpose_a ? a_rows : a_cols;
  const std::int64_t m = transpose_b ? b_rows : b_cols;
  const Shape batch = broadcast_shapes(batch_of(as), batch_of(bs), "matmul");
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  Tensor out = empty(out_shape, a.dtype());
  const std::int64_t batches = shape_numel(batch);
  const GemmOperand ga = gemm_operand(a, transpose_a, batch), gb = gemm_operand(b, transpose_b, batch);
  detail::dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(ga.values.impl()->storage->data());
    const T* pb = static_cast<const T*>(gb.values.impl()->storage->data());
    T* po = out.data<T>();
    std::vector<std::int64_t> index(batch.size(), 0);
    std::int64_t offset_a = ga.offset, offset_b = gb.offset;
    for (std::int64_t i = 0; i < batches; ++i) {
      kernels::gemm(ga.transposed, gb.transposed, n, m, k, T(1), pa + offset_a, ga.ld, pb + offset_b, gb.ld, T(0),
                    po + i * n * m, m);
      for (std::size_t d = batch.size(); d-- > 0;) {
        offset_a += ga.batch_strides[d];
        offset_b += gb.batch_strides[d];
        if (++index[d] < batch[d]) break;
        offset_a -= ga.batch_strides[d] * batch[d];
        offset_b -= gb.batch_strides[d] * batch[d];
        index[d] = 0;
      }
    }
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  a.check_defined("matmul");
  b.check_defined("matmul");
  if (a.dim() == 0 || b.dim() == 0)
    fail("matmul: both arguments need at least 1 dim, got shapes {} and {}", shape_string(a.shape()),
         shape_string(b.shape()));
  if (a.dtype() != b.dtype())
    fail("matmul: dtype mismatch between {} {} and {} {}", shape_string(a.shape()), dtype_name(a.dtype()),
         shape_string(b.shape()), dtype_name(b.dtype()));
  const Shape &as = a.shape(), &bs = b.shape();
  const std::int64_t k = as.back(), kb = b.dim() == 1 ? bs[0] : bs[bs.size() - 2];
  if (k != kb)
    fail("matmul: shapes {} and {} cannot be multiplied ({} != {})", shape_string(as), shape_string(bs), k, kb);

  // Bring both sides to >= 2 dims as PyTorch does, and fold a's batch into its rows when b is a single
  // matrix ([B, N, K] x [K, M] is one [B*N, K] x [K, M] GEMM). out_shape is the shape the user sees.
  Shape a2 = as, b2 = bs, out_shape;
  if (a.dim() == 1) a2 = {1, k};
  if (b.dim() == 1) b2 = {k, 1};
  // Note: the rows are the product of the leading dims, not numel / k, which divides by zero when k == 0.
  if (b2.size() == 2 && a2.size() > 2) a2 = {shape_numel(Shape(as.begin(), as.end() - 1)), k};
  if (a.dim() >= 2 && b.dim() <= 2) {
    out_shape.assign(as.begin(), as.end() - 1);
    if (b.dim() == 2) out_shape.push_back(bs[1]);
  } else {
    const Shape batch_a = a.dim() > 2 ? batch_of(as) : Shape{}, batch_b = batch_of(b2);
    Shape batch;
    try {
      batch = broadcast_shapes(batch_a, batch_b, "matmul");
    } catch (const Error&) {
      fail("matmul: batch dims of {} and {} cannot be broadcast ({} vs {})", shape_string(as), shape_string(bs),
           shape_string(batch_a), shape_string(batch_b));
    }
    out_shape = batch;
    if (a.dim() >= 2) out_shape.push_back(as[as.size() - 2]);
    if (b.dim() >= 2) out_shape.push_back(bs.back());
  }
  if (detail::autocast_applies({a, b})) return detail::autocast_matmul(a, b, a2, b2, out_shape);
  Tensor product = batched_product(raw_view(a, a2), false, raw_view(b, b2), false);
  const Shape product_shape = product.shape();
  Tensor out = product.reshape(out_shape);
  return record_if_needed("matmul", out, {a, b}, [&] {
    return [sa = SavedTensor(a, "matmul"), sb = SavedTensor(b, "matmul"), a2, b2, product_shape](const Tensor& g,
                                                                                                 NeedsGrad needs) {
      const Tensor &x = sa.get(), &y = sb.get();
      Tensor ga, gb;
      if (!is_grad_enabled()) {  // first order: raw GEMMs against transposed operands, nothing copied
        const Tensor g2 = raw_view(g, product_shape);
        if (needs[0]) ga = sum_to(batched_product(g2, false, raw_view(y, b2), true), a2).reshape(x.shape());
        if (needs[1]) gb = sum_to(batched_product(raw_view(x, a2), true, g2, false), b2).reshape(y.shape());
      } else {  // create_graph: the same formulas as recorded ops, so they are differentiable in g, a and b
        const Tensor g2 = g.reshape(product_shape);
        if (needs[0]) ga = sum_to(matmul(g2, transpose(y.reshape(b2), -1, -2)), a2).reshape(x.shape());
        if (needs[1]) gb = sum_to(matmul(transpose(x.reshape(a2), -1, -2), g2), b2).reshape(y.shape());
      }
      return std::vector<Tensor>{ga, gb};
    };
  });
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous(), bias = bias_in.contiguous();
  x.check_defined("linear");
  weight.check_defined("linear");
  if (weight.dim() != 2) fail("linear: weight must be 2-D [out, in], got {}", shape_string(weight.shape()));
  if (x.dim() == 0) fail("linear: input must have at least 1 dim, got a 0-dim tensor");
  const std::int64_t in = weight.size(1), out_features = weight.size(0);
  if (x.shape().back() != in)
    fail("linear: input {} and weight {} cannot be multiplied ({} != {})", shape_string(x.shape()),
         shape_string(weight.shape()), x.shape().back(), in);
  if (x.dtype() != weight.dtype())
    fail("linear: dtype mismatch between input {} and weight {}", dtype_name(x.dtype()), dtype_name(weight.dtype()));
  if (bias.defined() && (bias.shape() != Shape{out_features} || bias.dtype() != x.dtype()))
    fail("linear: bias must be a {} tensor of shape [{}], got {} {}", dtype_name(x.dtype()), out_features,
         dtype_name(bias.dtype()), shape_string(bias.shape()));
  if (detail::autocast_applies({x, weight, bias})) return detail::autocast_linear(x, weight, bias);
  const std::int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));  // not numel / in: in may be 0
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_features);
  Tensor out = empty(out_shape, x.dtype());
  detail::dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    kernels::linear(rows, out_features, in, x.data<T>(), weight.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                    out.data<T>());
  });
  return record_if_needed("linear", out, {x, weight, bias}, [&] {
    return [sx = SavedTensor(x, "linear"), sw = SavedTensor(weight, "linear"), rows, in, out_features](
               const Tensor& g, NeedsGrad needs) {
      const Tensor &input = sx.get(), &w = sw.get();
      std::vector<Tensor> grads(3);
      if (!is_grad_enabled()) {  // first order (the training hot path): three raw GEMMs / reductions
        detail::dispatch_floating(g.dtype(), "linear", [&](auto tag) {
          using T = decltype(tag);
          if (needs[0]) {  // dx = g W
            grads[0] = empty(input.shape(), g.dtype());
            kernels::gemm(false, false, rows, in, out_features, T(1), g.data<T>(), out_features, w.data<T>(), in,
                          T(0), grads[0].data<T>(), in);
          }
          if (needs[1]) {  // dW = g^T x
            grads[1] = empty(w.shape(), g.dtype());
            kernels::gemm(true, false, out_features, in, rows, T(1), g.data<T>(), out_features, input.data<T>(),
                          in, T(0), grads[1].data<T>(), in);
          }
          if (needs[2]) {
            grads[2] = empty({out_features}, g.dtype());
            kernels::column_sums(rows, out_features, g.data<T>(), grads[2].data<T>());
          }
        });
      } else {  // create_graph: composed recorded ops, differentiable in g, x and W
        const Tensor g2 = g.reshape({rows, out_features});
        if (needs[0]) grads[0] = matmul(g2, w).reshape(input.shape());
        if (needs[1]) grads[1] = matmul(transpose(g2, 0, 1), input.reshape({rows, in}));
        if (needs[2]) grads[2] = sum(g2, {0});
      }
      return grads;
    };
  });
}

namespace {

// torch.bmm's checks, naming `op`: both 3-D, equal batch sizes, inner extents agreeing, one floating dtype.
void check_bmm(const Tensor& batch1, const Tensor& batch2, const char* op) {
  batch1.check_defined(op);
  batch2.check_defined(op);
  if (batch1.dim() != 3) fail("{}: batch1 must be a 3D tensor, got shape {}", op, shape_string(batch1.shape()));
  if (batch2.dim() != 3) fail("{}: batch2 must be a 3D tensor, got shape {}", op, shape_string(batch2.shape()));
  const Shape expected{batch1.size(0), batch1.size(2)}, got{batch2.size(0), batch2.size(1)};
  if (expected != got)
    fail("{}: expected size for first two dimensions of batch2 tensor to be: {} but got: {} (batch1 {}, batch2 {})",
         op, shape_string(expected), shape_string(got), shape_string(batch1.shape()), shape_string(batch2.shape()));
  if (batch1.dtype() != batch2.dtype())
    fail("{}: expected scalar type {} but found {} (batch1 {}, batch2 {})", op, dtype_name(batch1.dtype()),
         dtype_name(batch2.dtype()), shape_string(batch1.shape()), shape_string(batch2.shape()));
  if (batch1.dtype() == DType::Int64) fail("{}: expected float32 or float64 tensors, got int64", op);
}

}  // namespace

Tensor bmm(const Tensor& batch1, const Tensor& batch2) {
  check_bmm(batch1, batch2, "bmm");
  return matmul(batch1, batch2);
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta, double alpha) {
  check_bmm(batch1, batch2, "baddbmm");
  input.check_defined("baddbmm");
  const Shape out_shape{batch1.size(0), batch1.size(1), batch2.size(2)};
  bool expands = input.dim() <= 3;
  try {
    expands = expands && broadcast_shapes(input.shape(), out_shape, "baddbmm") == out_shape;
  } catch (const Error&) {
    expands = false;
  }
  if (!expands)
    fail("baddbmm: input of shape {} cannot be broadcast to the product's shape {}", shape_string(input.shape()),
         shape_string(out_shape));
  if (input.dtype() != batch1.dtype())
    fail("baddbmm: expected scalar type {} but found {} for input {}", dtype_name(batch1.dtype()),
         dtype_name(input.dtype()), shape_string(input.shape()));
  Tensor out = matmul(batch1, batch2);
  if (alpha != 1.0) out = out * alpha;
  // Note: as in PyTorch, beta = 0 drops input altogether, so NaN or inf in it cannot leak through 0 * input.
  if (beta == 0.0) return out;
  return out + (beta == 1.0 ? input : input * beta);
}

}  // namespace tapegrad
