// The libtorch-layers and typed-optimizer-state examples of docs/layers.md: the code between each pair of DOC
// markers is pasted verbatim into the page, and the last test cases fail if the two drift apart.
#include "support/doc_snippet.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

// DOC-BEGIN libtorch-layers
TEST_CASE("the normalisation, embedding and pooling layers a libtorch program uses") {
  // A tiny text-and-image model: token embeddings, a GroupNorm'd and an InstanceNorm'd feature map.
  nn::Embedding embed(nn::EmbeddingOptions{100, 8}.with_padding_idx(0));  // row 0 starts at zero, never learns
  nn::GroupNorm group_norm(2, 8);                                          // 2 groups of 4 channels
  nn::InstanceNorm2d instance_norm(nn::InstanceNormOptions{8}.with_track_running_stats(true));
  nn::BatchNorm3d volume_norm(nn::BatchNormOptions{8}.with_dtype(DType::Float64));
  nn::MaxPool2d pool(nn::MaxPool2dOptions{2}.with_return_indices(true));

  const Tensor tokens = from_vector(std::vector<std::int64_t>{5, 17, 0, 0, 42, 7, 7, 0}, {2, 4});
  const Tensor words = embed(tokens);                          // [2, 4, 8]: int64 indices of any shape
  const Tensor image = permute(words, {0, 2, 1}).reshape({2, 8, 2, 2});
  const Tensor features = instance_norm(group_norm(image));    // [2, 8, 2, 2]
  const auto [pooled, where] = pool.forward_with_indices(features);  // where: int64, h * W + w per plane
  CHECK(pooled.shape() == Shape{2, 8, 1, 1});
  CHECK(where.dtype() == DType::Int64);

  sum(pooled).backward();
  CHECK(embed.weight.grad().at({0, 0}) == 0.0);  // the padding row receives no gradient
  CHECK(volume_norm(randn({2, 8, 2, 2, 2}, default_generator(), TensorOptions{}.with_dtype(DType::Float64)))
            .dtype() == DType::Float64);

  // state_dict keys are PyTorch's
  CHECK(instance_norm.state().size() == 3);  // running_mean, running_var, num_batches_tracked
  CHECK(group_norm.state()[0].first == "weight");
}
// DOC-END libtorch-layers

// DOC-BEGIN optimizer-state
TEST_CASE("typed optimizer state: PyTorch's optimizer.state[p] fields, by parameter") {
  nn::Linear model(3, 1);
  optim::Adam adam(model.parameters(), {.lr = 1e-2});
  CHECK_FALSE(adam.state(model.weight).exp_avg.defined());  // nothing before the first step

  sum(model(ones({4, 3}))).backward();
  adam.step();
  const optim::AdamParamState s = adam.state(model.weight);
  CHECK(s.step.item() == 1);                      // 0-dim int64, as PyTorch's state["step"]
  CHECK(s.exp_avg.shape() == model.weight.shape());
  CHECK_FALSE(s.max_exp_avg_sq.defined());        // only with amsgrad

  Tensor second_moment = s.exp_avg_sq;            // a handle: shares the optimizer's tensor
  second_moment.fill_(0.0);                       // changes what the next step divides by

  // SGD: state(p).momentum_buffer; RMSprop: step, square_avg, momentum_buffer, grad_avg.
  // The string-keyed adam.state() still copies everything out, for saving.
  CHECK(adam.state().size() == 14);  // 7 hyperparameters, num_params, 3 entries for each of 2 parameters
}
// DOC-END optimizer-state

TEST_CASE("docs/layers.md quotes both examples verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_layers.cpp", "docs/layers.md", "libtorch-layers");
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_layers.cpp", "docs/layers.md", "optimizer-state");
}
