// scaled_dot_product_attention: PyTorch's numbers (tests/data/attention_reference.txt), float32 at large
// scores, gradients and second derivatives over random broadcast shapes and masks, fully excluded rows,
// one tape record, and the error messages. Dropout is in test_attention_dropout.cpp.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::testing;

namespace {

TensorOptions f64() { return TensorOptions{}.with_dtype(DType::Float64); }

const std::map<std::string, Tensor>& reference() {
  static const auto entries = load_reference_file("attention_reference.txt");
  return entries;
}
Tensor entry(const std::string& key) { return reference_entry(reference(), key); }

enum class MaskCase { None, Additive, Keep, Causal };

// A random attention problem: batch dims of q, k, v and the mask derived from one full batch shape (leading
// dims dropped, some extents turned into 1), L != S and E != Ev allowed; a keep-mask keeps column 0 of every
// row so that no row is fully excluded (that NaN case is tested apart).
struct Problem {
  Tensor q, k, v, mask;
  MaskCase kind = MaskCase::None;
};

Shape derive(const Shape& full) {
  const auto dropped = *rc::gen::inRange<std::size_t>(0, full.size() + 1);
  Shape s(full.begin() + static_cast<std::ptrdiff_t>(dropped), full.end());
  for (auto& extent : s)
    if (*rc::gen::arbitrary<bool>()) extent = 1;
  return s;
}

Shape with(Shape s, std::int64_t rows, std::int64_t cols) {
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

Problem gen_problem(int max_batch_dims, std::int64_t max_extent) {
  const Shape full = *gen::shape(0, max_batch_dims, 1, 3);
  const auto extent = [&] { return *rc::gen::inRange<std::int64_t>(1, max_extent + 1); };
  const std::int64_t L = extent(), S = extent(), E = extent(), Ev = extent();
  Problem p;
  p.q = *gen::tensor_of_shape(with(derive(full), L, E));
  p.k = *gen::tensor_of_shape(with(derive(full), S, E));
  p.v = *gen::tensor_of_shape(with(derive(full), S, Ev));
  p.kind = *rc::gen::element(MaskCase::None, MaskCase::Additive, MaskCase::Keep, MaskCase::Causal);
  const Shape batch = broadcast_shapes(broadcast_shapes(Shape(p.q.shape().begin(), p.q.shape().end() - 2),
                                                        Shape(p.k.shape().begin(), p.k.shape().end() - 2), "test"),
                                       Shape(p.v.shape().begin(), p.v.shape().end() - 2), "test");
  const Shape mask_shape = derive(with(batch, L, S));
  if (p.kind == MaskCase::Additive) p.mask = *gen::tensor_of_shape(mask_shape);
  if (p.kind == MaskCase::Keep) {
    std::vector<double> keep = *rc::gen::container<std::vector<double>>(
        static_cast<std::size_t>(shape_numel(mask_shape)), rc::gen::element(0.0, 1.0));
    const std::int64_t cols = mask_shape.empty() ? 1 : mask_shape.back();
    for (std::size_t i = 0; i < keep.size(); i += static_cast<std::size_t>(cols)) keep[i] = 1.0;
    p.mask = from_vector(keep, mask_shape, f64());
  }
  return p;
}

// The attention of problem p on inputs x = {q, k, v[, additive mask]}.
Tensor attend(const Problem& p, const std::vector<Tensor>& x) {
  if (p.kind == MaskCase::Additive) return scaled_dot_product_attention(x[0], x[1], x[2], x[3]);
  if (p.kind == MaskCase::Keep) return scaled_dot_product_attention(x[0], x[1], x[2], AttentionMask::keep(p.mask));
  return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, p.kind == MaskCase::Causal);
}

std::vector<Tensor> inputs_of(const Problem& p) {
  std::vector<Tensor> x{p.q, p.k, p.v};
  if (p.kind == MaskCase::Additive) x.push_back(p.mask);
  return x;
}

// softmax(q kᵀ / sqrt(E) + mask) v from separate ops: the definition the fused op is held to.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& additive) {
  Tensor scores = mul(matmul(q, transpose(k, -1, -2)), 1.0 / std::sqrt(static_cast<double>(q.shape().back())));
  if (additive.defined()) scores = add(scores, additive);
  return matmul(softmax(scores, -1), v);
}

}  // namespace

TEST_CASE("attention matches PyTorch's softmax(q kᵀ / sqrt(E) + mask) v and its gradients") {
  for (const std::string name : {"plain", "additive", "additive_full", "keep_padding", "causal", "causal_square",
                                 "broadcast", "broadcast_mask", "unbatched"}) {
    CAPTURE(name);
    Tensor q = entry(name + "/q").requires_grad_(), k = entry(name + "/k").requires_grad_(),
           v = entry(name + "/v").requires_grad_();
    const bool additive = name.rfind("additive", 0) == 0 || name == "broadcast_mask";
    AttentionMask mask;
    Tensor additive_mask;
    if (additive) mask = additive_mask = entry(name + "/mask").requires_grad_();
    if (name == "keep_padding") mask = AttentionMask::keep(entry(name + "/mask"));
    const Tensor out = scaled_dot_product_attention(q, k, v, mask, 0.0, name.rfind("causal", 0) == 0);
    CHECK(allclose(out, entry(name + "/out"), 1e-12, 1e-13));
    sum(mul(out, entry(name + "/upstream"))).backward();
    CHECK(allclose(q.grad(), entry(name + "/grad_q"), 1e-10, 1e-12));
    CHECK(allclose(k.grad(), entry(name + "/grad_k"), 1e-10, 1e-12));
    CHECK(allclose(v.grad(), entry(name + "/grad_v"), 1e-10, 1e-12));
    if (additive) CHECK(allclose(additive_mask.grad(), entry(name + "/grad_mask"), 1e-10, 1e-12));
  }
}

TEST_CASE("float32 attention at scores of 1e4 is as accurate as PyTorch's float32 and never overflows") {
  for (const std::string key : {"f32/scaled/1/", "f32/scaled/1e2/", "f32/scaled/1e4/", "f32/shifted/1/",
                                "f32/shifted/1e2/", "f32/shifted/1e4/"}) {
    CAPTURE(key);
    Tensor q = entry(key + "q").to(DType::Float32).requires_grad_(),
           k = entry(key + "k").to(DType::Float32).requires_grad_(),
           v = entry(key + "v").to(DType::Float32).requires_grad_();
    const Tensor out = scaled_dot_product_attention(q, k, v);
    sum(mul(out, entry(key + "upstream").to(DType::Float32))).backward();
    const std::vector<std::pair<std::string, Tensor>> results{
        {"out", out}, {"grad_q", q.grad()}, {"grad_k", k.grad()}, {"grad_v", v.grad()}};
    for (const auto& [field, ours] : results) {
      CAPTURE(field);
      const Tensor exact = entry(key + "exact_" + field), torch32 = entry(key + "torch32_" + field);
      const double magnitude = max(abs(exact)).item();
      const double torch_error = max(abs(sub(torch32, exact))).item();
      const double our_error = max(abs(sub(ours.to(DType::Float64), exact))).item();
      CAPTURE(magnitude, torch_error, our_error);
      CHECK(std::isfinite(our_error));
      // PyTorch's own float32 error, with a floor of a few float32 ulps of the largest entry
      CHECK(our_error <= std::max(4 * torch_error, 1e-6 * magnitude));
    }
  }
}

TEST_CASE("attention gradients are right over random shapes, broadcast batches and masks") {
  rc::prop("q, k, v and an additive mask", [] {
    const Problem p = gen_problem(2, 4);
    RC_TAG(static_cast<int>(p.kind));
    TAPEGRAD_RC_GRADCHECK([&](const std::vector<Tensor>& x) { return attend(p, x); }, inputs_of(p));
  });
}

TEST_CASE("attention second derivatives are right over random shapes and masks") {
  rc::prop("q, k, v and an additive mask", [] {
    const Problem p = gen_problem(2, 3);
    RC_TAG(static_cast<int>(p.kind));
    TAPEGRAD_RC_GRADGRADCHECK([&](const std::vector<Tensor>& x) { return attend(p, x); }, inputs_of(p));
  });
}

TEST_CASE("the raw first-order backward equals the composed create_graph backward") {
  rc::prop("random problems", [] {
    const Problem p = gen_problem(2, 4);
    std::vector<Tensor> x = inputs_of(p);
    for (auto& t : x) t = t.detach().requires_grad_();
    const Tensor out = attend(p, x);
    const Tensor upstream = *gen::tensor_of_shape(out.shape());
    const auto raw = autograd::grad({out}, x, {upstream}, /*retain_graph=*/true, /*create_graph=*/false);
    const auto composed = autograd::grad({out}, x, {upstream}, false, /*create_graph=*/true);
    for (std::size_t i = 0; i < x.size(); ++i) TAPEGRAD_RC_ALLCLOSE(raw[i], composed[i], 1e-10, 1e-12);
  });
}

TEST_CASE("attention equals the composed definition, and a keep-mask equals an additive 0 / -inf mask") {
  rc::prop("values", [] {
    const Problem p = gen_problem(2, 5);
    const Tensor mask = p.kind == MaskCase::Additive ? p.mask
                        : p.kind == MaskCase::Keep   ? masked_fill(zeros_like(p.mask), eq(p.mask, 0.0), -INFINITY)
                                                     : Tensor();
    if (p.kind == MaskCase::Causal) return;
    TAPEGRAD_RC_ALLCLOSE(attend(p, inputs_of(p)), composed_attention(p.q, p.k, p.v, mask), 1e-12, 1e-13);
    if (p.kind == MaskCase::Keep)
      TAPEGRAD_RC_IDENTICAL(attend(p, inputs_of(p)), scaled_dot_product_attention(p.q, p.k, p.v, mask));
  });
}

TEST_CASE("is_causal keeps entry (i, j) for j <= i, top-left aligned when L != S") {
  Generator generator(3);
  const Tensor q = randn({2, 3, 4}, generator, f64()), k = randn({2, 5, 4}, generator, f64()),
               v = randn({2, 5, 2}, generator, f64());
  const Tensor keep = from_vector(std::vector<double>{1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0}, {3, 5}, f64());
  CHECK(identical(scaled_dot_product_attention(q, k, v, {}, 0.0, true),
                  scaled_dot_product_attention(q, k, v, AttentionMask::keep(keep))));
  // the first row sees only the first key: its output is that key's value
  CHECK(allclose(slice(scaled_dot_product_attention(q, k, v, {}, 0.0, true), 1, 0, 1), slice(v, 1, 0, 1)));
}

TEST_CASE("a fully excluded row is NaN, as in PyTorch 2.0-2.4, and leaves the other rows finite") {
  Generator generator(5);
  for (const DType dtype : {DType::Float32, DType::Float64}) {
    const TensorOptions options = TensorOptions{}.with_dtype(dtype);
    const Tensor q = randn({3, 2}, generator, options), k = randn({4, 2}, generator, options),
                 v = randn({4, 3}, generator, options);
    Tensor keep = ones({3, 4}, options);
    keep = masked_fill(keep, from_vector(std::vector<double>{0, 1, 0}, {3, 1}, options), 0.0);  // row 1 excluded
    const std::vector<double> keep_rows = scaled_dot_product_attention(q, k, v, AttentionMask::keep(keep)).to_vector();
    const Tensor minus_inf = masked_fill(zeros({3, 4}, options), eq(keep, 0.0), -INFINITY);
    const std::vector<double> additive_rows = scaled_dot_product_attention(q, k, v, minus_inf).to_vector();
    for (const auto& rows : {keep_rows, additive_rows})
      for (std::size_t i = 0; i < rows.size(); ++i) CHECK(std::isnan(rows[i]) == (i / 3 == 1));
  }
}

TEST_CASE("attention records exactly one tape entry, and none without grad") {
  Tensor q = ones({2, 3, 4}, f64().with_requires_grad()), k = ones({2, 5, 4}, f64().with_requires_grad());
  Tensor v = ones({2, 5, 6}, f64().with_requires_grad()), mask = zeros({3, 5}, f64().with_requires_grad());
  const auto before = tape_size();
  Tensor out = scaled_dot_product_attention(q, k, v, mask);
  CHECK(tape_size() == before + 1);
  CHECK(out.grad_fn_name() == "scaled_dot_product_attention");
  scaled_dot_product_attention(q, k, v, {}, 0.3, true);
  CHECK(tape_size() == before + 2);
  scaled_dot_product_attention(q, k, v, AttentionMask::keep(ones({3, 5}, f64())));
  CHECK(tape_size() == before + 3);
  {
    NoGradGuard guard;
    scaled_dot_product_attention(q, k, v, mask, 0.5);
    CHECK(tape_size() == before + 3);
  }
  sum(out).backward();
  CHECK(mask.grad().defined());
}

TEST_CASE("attention reads transposed and sliced inputs by their values") {
  Generator generator(9);
  const Tensor q = randn({2, 4, 3}, generator, f64()), k = randn({2, 4, 5}, generator, f64()),
               v = randn({2, 6, 5}, generator, f64());
  const Tensor qt = transpose(q, -1, -2), kt = transpose(k, -1, -2), vs = slice(v, 1, 0, 5);
  CHECK(identical(scaled_dot_product_attention(qt, kt, vs),
                  scaled_dot_product_attention(qt.contiguous(), kt.contiguous(), vs.contiguous())));
}

TEST_CASE("attention errors name the op and the shapes") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({2, 5, 3}), v),
                    "scaled_dot_product_attention: the embedding size of query (4) and key (3) differ (query [2, 3, "
                    "4], key [2, 5, 3], value [2, 5, 6])");
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, zeros({2, 4, 6})),
                    Catch::Contains("scaled_dot_product_attention: key and value need the same sequence length S, "
                                    "got 5 and 4"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({3, 5, 4}), zeros({3, 5, 6})),
                    "scaled_dot_product_attention: the batch dims of query [2, 3, 4], key [3, 5, 4], value [3, 5, 6] "
                    "do not broadcast");
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, zeros({3, 4})),
                    "scaled_dot_product_attention: attn_mask of shape [3, 4] does not broadcast to the attention "
                    "weights' shape [2, 3, 5] (query [2, 3, 4], key [2, 5, 4], value [2, 5, 6])");
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, zeros({2, 2, 3, 5})),
                    Catch::Contains("attn_mask of shape [2, 2, 3, 5] does not broadcast to the attention weights' "
                                    "shape [2, 3, 5]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, AttentionMask::keep(ones({3, 5})), 0.0, true),
                    "scaled_dot_product_attention: an explicit attn_mask ([3, 5]) cannot be combined with "
                    "is_causal=true");
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, zeros({3, 5}, f64())),
                    Catch::Contains("an additive attn_mask must have the query's dtype float32, got float64"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, from_vector(std::vector<std::int64_t>(15, 1), {3, 5})),
                    Catch::Contains("use AttentionMask::keep"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, zeros({2, 5, 6}, f64())),
                    "scaled_dot_product_attention: query, key and value must share one float dtype, got float32, "
                    "float32 and float64");
  CHECK_THROWS_WITH(scaled_dot_product_attention(zeros({4}), k, v),
                    Catch::Contains("query, key and value need at least 2 dims [..., L, E], got query [4]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {}, 1.5),
                    "scaled_dot_product_attention: dropout_p has to be between 0 and 1, got 1.5");
}
