#include <tapegrad/layers/embedding.h>

#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/init.h>
#include <tapegrad/framework/ops/embedding.h>

namespace tapegrad::nn {

namespace {

// PyTorch's rule: padding_idx in [-num_embeddings, num_embeddings), a negative one counting from the end.
std::optional<std::int64_t> normalized_padding(std::optional<std::int64_t> padding_idx, std::int64_t rows) {
  if (!padding_idx) return std::nullopt;
  if (*padding_idx >= rows || *padding_idx < -rows)
    fail("Embedding: padding_idx {} must be within num_embeddings {} (in [{}, {}))", *padding_idx, rows, -rows, rows);
  return *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
}

}  // namespace

Embedding::Embedding(EmbeddingOptions options) : Module("Embedding"), options_(options) {
  if (options_.num_embeddings < 0)
    fail("Embedding: num_embeddings must be non-negative, got {}", options_.num_embeddings);
  if (options_.embedding_dim < 0)
    fail("Embedding: embedding_dim must be non-negative, got {}", options_.embedding_dim);
  if (!is_floating(options_.dtype))
    fail("Embedding: dtype must be float32 or float64, got {}", dtype_name(options_.dtype));
  options_.padding_idx = normalized_padding(options_.padding_idx, options_.num_embeddings);
  Generator* generator = options_.generator;
  options_.generator = nullptr;
  weight = register_parameter("weight", zeros({options_.num_embeddings, options_.embedding_dim},
                                              TensorOptions{}.with_dtype(options_.dtype)));
  reset_parameters(generator ? *generator : default_generator());
}

Embedding::Embedding(Pretrained, const Tensor& embeddings, bool freeze, std::optional<std::int64_t> padding_idx)
    : Module("Embedding") {
  embeddings.check_defined("Embedding::from_pretrained");
  if (embeddings.dim() != 2)
    fail("Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, embedding_dim], got {}",
         shape_string(embeddings.shape()));
  if (!is_floating(embeddings.dtype()))
    fail("Embedding::from_pretrained: embeddings must be float32 or float64, got {}", dtype_name(embeddings.dtype()));
  options_.num_embeddings = embeddings.size(0);
  options_.embedding_dim = embeddings.size(1);
  options_.dtype = embeddings.dtype();
  options_.padding_idx = normalized_padding(padding_idx, options_.num_embeddings);
  // Note: detach() shares the values but gives the layer its own leaf, so requires_grad and .grad belong to
  // the layer, not to the caller's tensor.
  weight = register_parameter("weight", embeddings.detach(), !freeze);
}

std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze,
                                                      std::optional<std::int64_t> padding_idx) {
  return std::shared_ptr<Embedding>(new Embedding(Pretrained{}, embeddings, freeze, padding_idx));
}

void Embedding::reset_parameters(Generator& generator) {
  init::normal_(weight, 0.0, 1.0, generator);
  if (!options_.padding_idx) return;
  NoGradGuard no_grad;
  std::vector<double> keep(static_cast<std::size_t>(options_.num_embeddings), 1.0);
  keep[static_cast<std::size_t>(*options_.padding_idx)] = 0.0;
  weight.mul_(from_vector(keep, {options_.num_embeddings, 1}, TensorOptions{}.with_dtype(weight.dtype())));
}

Tensor Embedding::forward(const Tensor& indices) {
  indices.check_defined("Embedding");
  if (indices.dtype() != DType::Int64)
    fail("Embedding: expected int64 indices, got {} of shape {}", dtype_name(indices.dtype()),
         shape_string(indices.shape()));
  return embedding(weight, indices, options_.padding_idx);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", options_.num_embeddings, options_.embedding_dim);
  if (options_.padding_idx) s += fmt::format(", padding_idx={}", *options_.padding_idx);
  return s;
}

std::shared_ptr<Module> Embedding::clone() const {
  // Note: clone_into overwrites the weight and its requires_grad flag, so the fresh layer draws its throwaway
  // init from a local generator instead of advancing the caller's random stream.
  Generator scratch;
  EmbeddingOptions options = options_;
  options.generator = &scratch;
  return clone_into(std::make_shared<Embedding>(options));
}

}  // namespace tapegrad::nn
