// matmul reads transposed, narrowed, row-sliced and batch-permuted views where they lie (GEMM with a transpose
// flag and a leading dimension) and copies only layouts GEMM cannot express. Every layout is checked against
// a product written with broadcasting and sum, which shares no code with the GEMM path, in float64 and
// float32, and its gradients are checked in float64.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;

namespace {

// The ways a matrix operand of logical shape [batch..., rows, cols] can lie in memory.
enum class Layout { Contiguous, Transposed, Narrowed, TransposedNarrowed, RowStep, BothSteps, BatchPermuted, Expanded };
constexpr int layout_count = 8;

struct Operand {
  Layout layout;
  Shape shape;   // the logical shape matmul sees
  Shape base;    // the shape of the tensor the view is cut from
};

Operand operand(Layout layout, Shape shape) {
  Shape base = shape;
  const std::size_t r = shape.size() - 2, c = shape.size() - 1;
  switch (layout) {
    case Layout::Contiguous: break;
    case Layout::Transposed: std::swap(base[r], base[c]); break;
    case Layout::Narrowed: base[c] += 3; break;
    case Layout::TransposedNarrowed:
      std::swap(base[r], base[c]);
      base[c] += 2;
      break;
    case Layout::RowStep: base[r] *= 2; break;
    case Layout::BothSteps:
      base[r] *= 2;
      base[c] *= 2;
      break;
    case Layout::BatchPermuted:
      if (shape.size() >= 4) std::swap(base[0], base[1]);
      break;
    case Layout::Expanded:
      if (shape.size() >= 3) base[0] = 1;
      break;
  }
  return {layout, std::move(shape), std::move(base)};
}

// The view of `base` that has the operand's logical shape and layout.
Tensor cut(const Operand& o, const Tensor& base) {
  const std::int64_t rows = o.shape[o.shape.size() - 2], cols = o.shape.back();
  switch (o.layout) {
    case Layout::Contiguous: return base;
    case Layout::Transposed: return base.transpose(-1, -2);
    case Layout::Narrowed: return base.narrow(-1, 1, cols);
    case Layout::TransposedNarrowed: return base.narrow(-1, 2, rows).transpose(-1, -2);
    case Layout::RowStep: return base.slice(-2, 1, 2 * rows, 2);
    case Layout::BothSteps: return base.slice(-2, 0, 2 * rows, 2).slice(-1, 1, 2 * cols, 2);
    case Layout::BatchPermuted: return o.shape.size() >= 4 ? base.transpose(0, 1) : base;
    case Layout::Expanded: return o.shape.size() >= 3 ? base.expand(o.shape) : base;
  }
  return base;
}

rc::Gen<Operand> gen_operand(Shape shape) {
  return rc::gen::map(rc::gen::inRange(0, layout_count),
                      [shape](int layout) { return operand(static_cast<Layout>(layout), shape); });
}

// sum over k of a[..., n, k] * b[..., k, m], by broadcasting: independent of the GEMM path.
Tensor reference_product(const Tensor& a, const Tensor& b) { return sum(a.unsqueeze(-1) * b.unsqueeze(-3), {-2}); }

}  // namespace

TEST_CASE("matmul of strided views equals the product of their values") {
  rc::prop("random layouts of both operands, broadcast batch dims", [] {
    const auto batch_dims = *rc::gen::inRange<std::size_t>(0, 3);
    Shape batch_a, batch_b;
    for (std::size_t d = 0; d < batch_dims; ++d) {
      const std::int64_t e = *rc::gen::inRange<std::int64_t>(1, 4);
      batch_a.push_back(e);
      batch_b.push_back(*rc::gen::element(e, std::int64_t{1}));
    }
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 6), k = *rc::gen::inRange<std::int64_t>(1, 6),
                       m = *rc::gen::inRange<std::int64_t>(1, 6);
    Shape sa = batch_a, sb = *rc::gen::element(batch_b, Shape{});
    sa.insert(sa.end(), {n, k});
    sb.insert(sb.end(), {k, m});
    const Operand oa = *gen_operand(sa), ob = *gen_operand(sb);
    const Tensor base_a = *gen::tensor_of_shape(oa.base), base_b = *gen::tensor_of_shape(ob.base);
    const Tensor a = cut(oa, base_a), b = cut(ob, base_b);
    RC_ASSERT(a.shape() == sa);
    RC_ASSERT(b.shape() == sb);
    const Tensor expected = reference_product(a, b);
    RC_ASSERT(allclose(matmul(a, b), expected, 1e-12, 1e-12));
    // float32 through the same layouts (oneDNN's sgemm), against the float64 product
    const Tensor a32 = cut(oa, base_a.to(DType::Float32)), b32 = cut(ob, base_b.to(DType::Float32));
    RC_ASSERT(allclose(matmul(a32, b32).to(DType::Float64), expected, 1e-5, 1e-5));
    // a strided vector on the right: [.., n, k] x [k]
    const Tensor v = *gen::tensor_of_shape({2 * k});
    RC_ASSERT(allclose(matmul(a, v.slice(0, 0, 2 * k, 2)), reference_product(a, v.slice(0, 0, 2 * k, 2).unsqueeze(-1)).squeeze(-1),
                       1e-12, 1e-12));
  });
}

TEST_CASE("gradients of matmul through strided views are right") {
  rc::prop("random layouts, float64", [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 4), k = *rc::gen::inRange<std::int64_t>(1, 4),
                       m = *rc::gen::inRange<std::int64_t>(1, 4);
    const bool batched = *rc::gen::arbitrary<bool>();
    const Shape sa = batched ? Shape{2, 2, n, k} : Shape{n, k}, sb = batched ? Shape{2, 1, k, m} : Shape{k, m};
    const Operand oa = *gen_operand(sa), ob = *gen_operand(sb);
    const Tensor base_a = *gen::tensor_of_shape(oa.base), base_b = *gen::tensor_of_shape(ob.base);
    TAPEGRAD_RC_GRADCHECK(
        [=](const std::vector<Tensor>& v) {
          Tensor y = matmul(cut(oa, v[0]), cut(ob, v[1]));
          return y * y;
        },
        (std::vector<Tensor>{base_a, base_b}));
  });
}

TEST_CASE("matmul reads a transposed operand in place and leaves its base alone") {
  Tensor w = arange(0.0, 6.0, 1.0, DType::Float32).reshape({2, 3});
  Tensor x = ones({4, 3}, TensorOptions{}.with_dtype(DType::Float32));
  const std::uint64_t version = w.version();
  Tensor y = matmul(x, w.t());  // the Linear forward spelled by hand
  CHECK(y.shape() == Shape{4, 2});
  CHECK(y.to_vector() == std::vector<double>{3, 12, 3, 12, 3, 12, 3, 12});
  CHECK(w.version() == version);
  CHECK(w.is_contiguous());
}
