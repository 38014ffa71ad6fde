#pragma once
/// nn::Embedding: a lookup table of num_embeddings vectors of embedding_dim, indexed by int64 tensors.
#include <tapegrad/export.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Options for Embedding, with PyTorch's names and defaults.
struct EmbeddingOptions {
  std::int64_t num_embeddings = 0;
  std::int64_t embedding_dim = 0;
  /// A row that is initialised to zero and never receives a gradient (e.g. the padding token). Negative
  /// counts from the end, as in PyTorch (-1 is num_embeddings - 1).
  std::optional<std::int64_t> padding_idx = std::nullopt;
  /// The element type of the weight.
  DType dtype = DType::Float32;
  /// Where the initial values come from (default_generator() when null). Only used while constructing.
  Generator* generator = nullptr;
  EmbeddingOptions& with_padding_idx(std::int64_t index) {
    padding_idx = index;
    return *this;
  }
  EmbeddingOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
  EmbeddingOptions& with_generator(Generator& g) {
    generator = &g;
    return *this;
  }
};

/// Note: weight [num_embeddings, embedding_dim] is initialised N(0, 1), as in PyTorch, with the padding_idx row
/// then set to zero. forward(indices) takes an int64 tensor of any shape and returns indices.shape +
/// [embedding_dim]; its backward scatter-adds the output gradient into the rows used (repeats accumulate),
/// skipping padding_idx. An index outside [0, num_embeddings) throws, naming the op and the index.
/// PyTorch's max_norm, scale_grad_by_freq and sparse options are not supported.
class Embedding : public Module {
 public:
  explicit Embedding(EmbeddingOptions options);
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim)
      : Embedding(EmbeddingOptions{num_embeddings, embedding_dim}) {}

  /// An Embedding whose weight is `embeddings` ([num_embeddings, embedding_dim], float32 or float64), which
  /// it shares (as PyTorch's does: training it changes `embeddings`' values). With `freeze` (the default)
  /// the weight does not require grad. The padding_idx row is kept as given, not zeroed, as in PyTorch.
  static std::shared_ptr<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                    std::optional<std::int64_t> padding_idx = std::nullopt);

  /// int64 indices of any shape -> indices.shape + [embedding_dim].
  Tensor forward(const Tensor& indices) override;
  /// "10, 3" or "10, 3, padding_idx=0".
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  /// The options the layer was built with (generator cleared, padding_idx made non-negative).
  const EmbeddingOptions& options() const { return options_; }
  /// Redraws the weight from N(0, 1) and zeroes the padding_idx row.
  void reset_parameters(Generator& generator = default_generator());

  Tensor weight;

 private:
  struct Pretrained {};
  Embedding(Pretrained, const Tensor& embeddings, bool freeze, std::optional<std::int64_t> padding_idx);
  EmbeddingOptions options_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
