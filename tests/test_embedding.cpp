// Embedding: the lookup op and its scatter-add backward (float64 gradient properties, to second order),
// padding_idx, from_pretrained, index errors, and the layer's names, init and printing.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// Random int64 indices in [0, rows) of a random shape (0 to 3 dims, repeats likely).
Tensor gen_indices(std::int64_t rows) {
  const Shape shape = *gen::shape(0, 3, 1, 4);
  std::vector<std::int64_t> values;
  for (std::int64_t i = 0; i < shape_numel(shape); ++i) values.push_back(*rc::gen::inRange<std::int64_t>(0, rows));
  return from_vector(values, shape);
}

}  // namespace

TEST_CASE("embedding picks rows: output shape is indices.shape + [dim]") {
  const Tensor weight = tensor({0, 1, 10, 11, 20, 21}, {3, 2}, f64);
  const Tensor indices = from_vector(std::vector<std::int64_t>{2, 0, 2, 1}, {2, 2});
  CHECK(identical(embedding(weight, indices), tensor({20, 21, 0, 1, 20, 21, 10, 11}, {2, 2, 2}, f64)));
  CHECK(embedding(weight, from_vector(std::vector<std::int64_t>{1}, {})).shape() == Shape{2});
  CHECK(embedding(weight, from_vector(std::vector<std::int64_t>{}, {0, 3})).shape() == Shape{0, 3, 2});
}

TEST_CASE("embedding's gradients are right in the weight, to second order (float64)") {
  rc::prop("gradcheck and gradgradcheck over random tables and indices", [] {
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 6), dim = *rc::gen::inRange<std::int64_t>(1, 4);
    const Tensor indices = gen_indices(rows);
    const Tensor weight = *gen::tensor_of_shape({rows, dim});
    auto f = [=](const std::vector<Tensor>& v) { return embedding(v[0], indices); };
    TAPEGRAD_RC_GRADCHECK(f, {weight});
    TAPEGRAD_RC_GRADGRADCHECK(f, {weight});
    // embedding_backward is linear in its gradient argument, and its own backward is the lookup
    const Tensor g = *gen::tensor_of_shape([&] {
      Shape s = indices.shape();
      s.push_back(dim);
      return s;
    }());
    auto b = [=](const std::vector<Tensor>& v) { return embedding_backward(v[0], indices, rows); };
    TAPEGRAD_RC_GRADCHECK(b, {g});
    TAPEGRAD_RC_GRADGRADCHECK(b, {g});
  });
}

TEST_CASE("with padding_idx the padding row gets no gradient and every other row the same as without") {
  rc::prop("padding rows of the gradient are zero, others equal the plain scatter-add", [] {
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 6), dim = *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t padding = *rc::gen::inRange<std::int64_t>(0, rows);
    const Tensor indices = gen_indices(rows);
    const Tensor weight = (*gen::tensor_of_shape({rows, dim})).requires_grad_(true);
    const Tensor y = embedding(weight, indices, padding);
    RC_ASSERT(identical(y, embedding(weight.detach(), indices)));  // the forward still reads the padding row
    const Tensor upstream = randn(y.shape(), default_generator(), f64);
    const Tensor g = autograd::grad({y}, {weight}, {upstream})[0];
    const Tensor plain = embedding_backward(upstream, indices, rows);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < dim; ++j) RC_ASSERT(g.at({r, j}) == (r == padding ? 0.0 : plain.at({r, j})));
    // second order through the padded op: the gradient of <g, c> with respect to upstream is the lookup
    // with padding positions zeroed
    auto f = [=](const std::vector<Tensor>& v) { return embedding_backward(v[0], indices, rows, padding); };
    TAPEGRAD_RC_GRADCHECK(f, {upstream});
  });
}

TEST_CASE("Embedding has PyTorch's names, N(0, 1) init, zero padding row and printing") {
  Generator generator(7);
  nn::Embedding emb(nn::EmbeddingOptions{10, 3}.with_padding_idx(-2).with_generator(generator));
  CHECK(emb.state().size() == 1);
  CHECK(emb.state()[0].first == "weight");
  CHECK(emb.weight.shape() == Shape{10, 3});
  CHECK(emb.options().padding_idx == 8);
  for (std::int64_t j = 0; j < 3; ++j) CHECK(emb.weight.at({8, j}) == 0.0);
  CHECK(emb.weight.at({0, 0}) != 0.0);
  CHECK(emb.extra_repr() == "10, 3, padding_idx=8");
  CHECK(nn::Embedding(5, 2).extra_repr() == "5, 2");
  nn::Embedding big(200, 50);
  const auto v = big.weight.to_vector();
  double sum = 0, squares = 0;
  for (double x : v) sum += x, squares += x * x;
  const double mean = sum / static_cast<double>(v.size());
  CHECK(std::abs(mean) < 0.02);
  CHECK(std::abs(squares / static_cast<double>(v.size()) - mean * mean - 1.0) < 0.05);
  auto copy = std::dynamic_pointer_cast<nn::Embedding>(emb.clone());
  REQUIRE(copy);
  CHECK(identical(copy->weight, emb.weight));
  CHECK(copy->options().padding_idx == 8);
}

TEST_CASE("Embedding takes int64 indices of any shape and names a bad index") {
  nn::Embedding emb(nn::EmbeddingOptions{4, 2}.with_dtype(DType::Float64));
  CHECK(emb(from_vector(std::vector<std::int64_t>{0, 3, 1, 1, 2, 0}, {1, 2, 3})).shape() == Shape{1, 2, 3, 2});
  CHECK_THROWS_WITH(emb(from_vector(std::vector<std::int64_t>{0, 4, 1}, {3})),
                    "embedding: index 4 at position [1] of indices [3] is out of range for 4 embeddings "
                    "(expected [0, 4))");
  CHECK_THROWS_WITH(emb(from_vector(std::vector<std::int64_t>{0, 1, 2, -1}, {2, 2})),
                    "embedding: index -1 at position [1, 1] of indices [2, 2] is out of range for 4 embeddings "
                    "(expected [0, 4))");
  CHECK_THROWS_WITH(emb(zeros({3})), "Embedding: expected int64 indices, got float32 of shape [3]");
  CHECK_THROWS_WITH(nn::Embedding(nn::EmbeddingOptions{4, 2}.with_padding_idx(4)),
                    "Embedding: padding_idx 4 must be within num_embeddings 4 (in [-4, 4))");
  CHECK_THROWS_WITH(embedding(zeros({4}), from_vector(std::vector<std::int64_t>{0}, {1})),
                    "embedding: weight must be 2-D [num_embeddings, embedding_dim], got [4]");
}

TEST_CASE("Embedding trains: repeated indices accumulate, the padding row never moves") {
  nn::Embedding emb(nn::EmbeddingOptions{5, 2}.with_padding_idx(0).with_dtype(DType::Float64));
  const Tensor before = emb.weight.detach().clone();
  optim::SGD sgd(emb.parameters(), {.lr = 0.5});
  const Tensor indices = from_vector(std::vector<std::int64_t>{0, 3, 3, 1}, {4});
  sum(emb(indices)).backward();
  CHECK(identical(emb.weight.grad(), tensor({0, 0, 1, 1, 0, 0, 2, 2, 0, 0}, {5, 2}, f64)));
  sgd.step();
  CHECK(identical(slice(emb.weight, 0, 0, 1), slice(before, 0, 0, 1)));
  CHECK(allclose(slice(emb.weight, 0, 3, 4), slice(before, 0, 3, 4) - 1.0, 1e-15));
}

TEST_CASE("Embedding::from_pretrained shares the table, freezes it by default and keeps the padding row") {
  const Tensor table = tensor({1, 2, 3, 4, 5, 6}, {3, 2}, f64);
  auto frozen = nn::Embedding::from_pretrained(table);
  CHECK_FALSE(frozen->weight.requires_grad());
  CHECK(frozen->options().num_embeddings == 3);
  CHECK(frozen->options().embedding_dim == 2);
  CHECK(frozen->options().dtype == DType::Float64);
  CHECK(frozen->weight.raw_data() == table.raw_data());  // shared, as PyTorch's Parameter(embeddings)
  CHECK_FALSE(table.requires_grad());
  auto trainable = nn::Embedding::from_pretrained(table, /*freeze=*/false, /*padding_idx=*/1);
  CHECK(trainable->weight.requires_grad());
  CHECK(trainable->weight.at({1, 0}) == 3.0);  // not zeroed
  const Tensor y = (*trainable)(from_vector(std::vector<std::int64_t>{1, 2}, {2}));
  CHECK(identical(y, tensor({3, 4, 5, 6}, {2, 2}, f64)));
  sum(y).backward();
  CHECK(identical(trainable->weight.grad(), tensor({0, 0, 0, 0, 1, 1}, {3, 2}, f64)));
  CHECK_THROWS_WITH(nn::Embedding::from_pretrained(zeros({3})),
                    "Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, embedding_dim], got [3]");
}
