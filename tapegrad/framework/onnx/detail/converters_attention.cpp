// ONNX form of scaled_dot_product_attention (one tape record in tapegrad; MultiheadAttention and the Transformer
// layers run on it): MatMul(q, kᵀ) · 1/sqrt(E), the mask, Softmax over the keys, MatMul with v, in opset 13's
// operators (ONNX has no attention operator in the default domain before opset 23).
// Note: an additive mask is an Add; a keep-mask (AttentionMask::keep) a Where that puts -inf at its zeros; is_causal
// a constant [L, S] additive mask (its L and S must not depend on a dynamic axis). A row with no key taking part
// gives NaN in both runtimes (Softmax over -inf only). Dropout inside attention has no inference form: a forward
// traced with dropout_p > 0 is refused (export runs the model in eval mode, where MultiheadAttention passes 0).
#include <tapegrad/framework/onnx/detail/graph.h>

#include <cmath>
#include <limits>
#include <numeric>

namespace tapegrad::onnx::detail {

namespace {

using Ints = std::vector<std::int64_t>;

void scaled_dot_product_attention(Context& c) {
  if (!c.has("is_causal")) c.unsupported("the op reported no is_causal / keep_mask attributes");
  if (c.f("dropout_p") > 0) c.unsupported("attention dropout (dropout_p > 0) has no inference form; export in eval mode");
  const Value& q = c.input_value(0);
  const Value& k = c.input_value(1);
  const DType dtype = c.dtype();
  const std::size_t rank_k = k.shape.size();
  Ints perm(rank_k);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[rank_k - 1], perm[rank_k - 2]);
  const std::int64_t E = q.shape.back();
  const std::string kt = c.emit("Transpose", {c.input(1)}, {{"perm", perm}});
  const std::string scores = c.emit("MatMul", {c.input(0), kt});
  std::string scaled = c.emit("Mul", {scores, c.scalar(1.0 / std::sqrt(static_cast<double>(E)), dtype)});
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (c.has_input(3)) scaled = c.emit("Add", {scaled, c.input(3)});
  if (c.has_tensor("keep_mask")) {
    const std::string excluded = c.emit("Equal", {c.tensor("keep_mask"), c.scalar(0.0, c.tensor_value("keep_mask").dtype)});
    scaled = c.emit("Where", {excluded, c.scalar(minus_inf, dtype), scaled});
  }
  if (c.i("is_causal") != 0) {
    const std::size_t rank_q = q.shape.size();
    if (q.dynamic(rank_q - 2) || k.dynamic(rank_k - 2))
      c.unsupported("is_causal with a sequence length that depends on a dynamic axis");
    const std::int64_t L = q.shape[rank_q - 2], S = k.shape[rank_k - 2];
    std::vector<double> mask(static_cast<std::size_t>(L * S), 0.0);
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t j = i + 1; j < S; ++j) mask[static_cast<std::size_t>(i * S + j)] = minus_inf;
    scaled = c.emit("Add", {scaled, c.emit("Reshape", {c.reals(mask, dtype), c.int64s({L, S})})});
  }
  const std::string weights = c.emit("Softmax", {scaled}, {{"axis", std::int64_t{-1}}});
  c.emit("MatMul", {weights, c.input(2)}, {}, {c.output()});
}

}  // namespace

void add_attention_converters(std::map<std::string, Converter>& table) {
  table["scaled_dot_product_attention"] = scaled_dot_product_attention;
}

}  // namespace tapegrad::onnx::detail
