// matmul and linear under autocast: bfloat16 operands, float32 accumulation and output, and a backward that does
// the same with the gradient (ops/detail/autocast.h). Also what the autocast ops share: autocast_applies and the
// rounded copies they save.
#include <tapegrad/framework/ops/detail/autocast.h>

#include <cstring>

#include <tapegrad/framework/autograd/detail/first_order_only.h>
#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/kernels/autocast_path.h>
#include <tapegrad/framework/kernels/column_sums.h>
#include <tapegrad/framework/kernels/gemm.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>

namespace tapegrad::detail {

bool autocast_applies(std::initializer_list<Tensor> tensors) {
  if (!autocast_enabled()) return false;
  for (const Tensor& t : tensors)
    if (t.defined() && t.dtype() != DType::Float32) return false;
  return true;
}

Bf16Values::Bf16Values(const Tensor& values, MemoryFormat format)
    : storage_(std::make_shared<Storage>(static_cast<std::size_t>(values.numel()) * 2)),
      shape_(values.shape()),
      format_(format) {
  const Tensor dense = values.contiguous(format);
  kernels::autocast::round_to_bf16(dense.data<float>(format), static_cast<std::uint16_t*>(storage_->data()), numel());
}

Tensor Bf16Values::widened() const {
  Tensor out = empty(shape_, DType::Float32, format_);
  kernels::autocast::widen_bf16(data(), out.data<float>(format_), numel());
  return out;
}

// Note: the backward multiplies bfloat16 copies that are not the op's inputs, so a graph built from it would have
// no path back to the inputs; rather than return a silently incomplete second derivative, create_graph is refused.
const char* autocast_create_graph_refusal(const char* op) {
  if (std::strcmp(op, "conv2d") == 0)
    return "conv2d: backward with create_graph=true through a bfloat16 autocast convolution is not supported; run "
           "the forward outside AutocastGuard for higher-order gradients";
  if (std::strcmp(op, "linear") == 0)
    return "linear: backward with create_graph=true through a bfloat16 autocast product is not supported; run the "
           "forward outside AutocastGuard for higher-order gradients";
  return "matmul: backward with create_graph=true through a bfloat16 autocast product is not supported; run the "
         "forward outside AutocastGuard for higher-order gradients";
}

Tensor first_order_only(Tensor recorded, const char* op) {
  autograd::detail::mark_first_order_only(recorded, autocast_create_graph_refusal(op));
  return recorded;
}

namespace {

// The backward's own check, behind the up-front one (first_order_only): a backward closure called some other way.
[[noreturn]] void refuse_create_graph(const char* op) { fail("{}", autocast_create_graph_refusal(op)); }

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// One rounded matrix operand: its values and how GEMM reads them (row-major, transposed when `transposed`).
struct Operand {
  Bf16Values values;
  bool transposed;
  std::int64_t ld;
};

// b2 of a folded product, rounded where it lies when it is the transpose of a contiguous matrix (x.matmul(w.t()),
// libtorch's and tapegrad's usual way to write x W^T), else from its contiguous copy.
Operand matrix_operand(const Tensor& b, std::int64_t rows, std::int64_t cols) {
  if (b.dim() == 2 && rows > 1 && cols > 1 && b.strides() == Shape{1, rows})
    return {Bf16Values(b.transpose(0, 1)), true, rows};
  return {Bf16Values(b.detach().reshape({rows, cols})), false, cols};
}

}  // namespace

Tensor autocast_matmul(const Tensor& a, const Tensor& b, const Shape& a2, const Shape& b2, const Shape& out_shape) {
  const std::int64_t n = a2[a2.size() - 2], k = a2.back(), m = b2.back();
  if (b2.size() == 2) {  // one GEMM: [rows, k] x [k, m]
    const Bf16Values va(a.detach().reshape(a2));
    Operand vb = matrix_operand(b, k, m);
    Tensor out = empty({n, m}, DType::Float32);
    kernels::gemm_bf16(false, vb.transposed, n, m, k, va.data(), k, vb.values.data(), vb.ld, nullptr,
                       out.data<float>(), m);
    out = out.reshape(out_shape);
    return first_order_only(record_if_needed("matmul", out, {a, b}, [&] {
      return [va, vb, n, m, k, a_shape = a.shape(), b_shape = b.shape()](const Tensor& g, NeedsGrad needs) {
        if (is_grad_enabled()) refuse_create_graph("matmul");
        const Bf16Values vg(g.detach().reshape({n, m}));
        Tensor ga, gb;
        if (needs[0]) {  // dA = g op(B)^T
          ga = empty({n, k}, DType::Float32);
          kernels::gemm_bf16(false, !vb.transposed, n, k, m, vg.data(), m, vb.values.data(), vb.ld, nullptr,
                             ga.data<float>(), k);
          ga = ga.reshape(a_shape);
        }
        if (needs[1]) {  // dB = A^T g
          gb = empty({k, m}, DType::Float32);
          kernels::gemm_bf16(true, false, k, m, n, va.data(), k, vg.data(), m, nullptr, gb.data<float>(), m);
          gb = gb.reshape(b_shape);
        }
        return std::vector<Tensor>{ga, gb};
      };
    }), "matmul");
  }
  // Batched: both sides expanded to the broadcast batch and made contiguous, one GEMM per matrix.
  const Shape batch = broadcast_shapes(batch_of(a2), batch_of(b2), "matmul");
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {n, k});
  b_full.insert(b_full.end(), {k, m});
  const Bf16Values va(a.detach().reshape(a2).expand(a_full)), vb(b.detach().reshape(b2).expand(b_full));
  const std::int64_t batches = shape_numel(batch);
  Shape product_shape = batch;
  product_shape.insert(product_shape.end(), {n, m});
  Tensor product = empty(product_shape, DType::Float32);
  for (std::int64_t i = 0; i < batches; ++i)
    kernels::gemm_bf16(false, false, n, m, k, va.data() + i * n * k, k, vb.data() + i * k * m, m, nullptr,
                       product.data<float>() + i * n * m, m);
  Tensor out = product.reshape(out_shape);
  return first_order_only(record_if_needed("matmul", out, {a, b}, [&] {
    return [va, vb, n, m, k, batches, a2, b2, product_shape, a_shape = a.shape(), b_shape = b.shape()](
               const Tensor& g, NeedsGrad needs) {
      if (is_grad_enabled()) refuse_create_graph("matmul");
      const Bf16Values vg(g.detach().reshape(product_shape));
      Tensor ga, gb;
      Shape a_full = va.shape(), b_full = vb.shape();
      if (needs[0]) {
        ga = empty(a_full, DType::Float32);
        for (std::int64_t i = 0; i < batches; ++i)
          kernels::gemm_bf16(false, true, n, k, m, vg.data() + i * n * m, m, vb.data() + i * k * m, m, nullptr,
                             ga.data<float>() + i * n * k, k);
        ga = sum_to(ga, a2).reshape(a_shape);
      }
      if (needs[1]) {
        gb = empty(b_full, DType::Float32);
        for (std::int64_t i = 0; i < batches; ++i)
          kernels::gemm_bf16(true, false, k, m, n, va.data() + i * n * k, k, vg.data() + i * n * m, m, nullptr,
                             gb.data<float>() + i * k * m, m);
        gb = sum_to(gb, b2).reshape(b_shape);
      }
      return std::vector<Tensor>{ga, gb};
    };
  }), "matmul");
}

Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const std::int64_t in = weight.size(1), out_features = weight.size(0);
  const std::int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_features);
  const Bf16Values vx(x), vw(weight);
  Tensor out = empty(out_shape, DType::Float32);
  kernels::gemm_bf16(false, true, rows, out_features, in, vx.data(), in, vw.data(), in,
                     bias.defined() ? bias.data<float>() : nullptr, out.data<float>(), out_features);
  return first_order_only(record_if_needed("linear", out, {x, weight, bias}, [&] {
    return [vx, vw, rows, in, out_features](const Tensor& g_in, NeedsGrad needs) {
      if (is_grad_enabled()) refuse_create_graph("linear");
      const Tensor g = g_in.contiguous();
      std::vector<Tensor> grads(3);
      if (needs[0] || needs[1]) {
        const Bf16Values vg(g);
        if (needs[0]) {  // dx = g W
          grads[0] = empty(vx.shape(), DType::Float32);
          kernels::gemm_bf16(false, false, rows, in, out_features, vg.data(), out_features, vw.data(), in, nullptr,
                             grads[0].data<float>(), in);
        }
        if (needs[1]) {  // dW = g^T x
          grads[1] = empty(vw.shape(), DType::Float32);
          kernels::gemm_bf16(true, false, out_features, in, rows, vg.data(), out_features, vx.data(), in, nullptr,
                             grads[1].data<float>(), in);
        }
      }
      if (needs[2]) {  // the bias was added in float32: its gradient is the float32 gradient's column sums
        grads[2] = empty({out_features}, DType::Float32);
        kernels::column_sums(rows, out_features, g.data<float>(), grads[2].data<float>());
      }
      return grads;
    };
  }), "linear");
}

}  // namespace tapegrad::detail
