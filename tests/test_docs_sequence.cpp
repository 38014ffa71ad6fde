// docs/sequence.md's example, compiled and run: the code between the DOC markers is exactly the page's snippet
// (the last test case checks that), and the other test cases assert what the page claims.
#include <catch2/catch.hpp>

#include <tapegrad/framework/testing/compare.h>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

// Is the running sum of a sequence's first feature positive at its end? A bidirectional 2-layer LSTM reads
// [batch, time, features] (batch_first) and a linear head classifies its last step. Returns the accuracy on
// a fresh batch after `steps` Adam steps.
double train_sequence_classifier(int steps) {
  manual_seed(0);
  auto lstm = std::make_shared<nn::LSTM>(
      nn::LSTMOptions(3, 16).with_num_layers(2).with_bidirectional(true).with_batch_first(true));
  auto head = std::make_shared<nn::Linear>(32, 2);  // 2 directions x 16 features
  std::vector<Tensor> parameters = lstm->parameters();
  for (const Tensor& p : head->parameters()) parameters.push_back(p);
  optim::Adam adam(parameters, optim::AdamOptions{.lr = 1e-2});

  auto batch = [](std::int64_t n) {
    Tensor x = randn({n, 12, 3});                                  // 12 steps of 3 features
    Tensor first_feature = select(x, 2, 0);                        // [n, 12]
    Tensor labels = gt(sum(first_feature, {1}), 0.0).to(DType::Int64);
    return std::pair{x, labels};
  };
  auto logits_of = [&](const Tensor& x) {
    Tensor output = lstm->forward(x);                              // [n, 12, 32]: every step, both directions
    return head->forward(select(output, 1, -1));                   // the last step
  };
  for (int step = 0; step < steps; ++step) {
    auto [x, labels] = batch(64);
    Tensor loss = cross_entropy(logits_of(x), labels);
    adam.zero_grad();
    loss.backward();
    adam.step();
  }
  NoGradGuard no_grad;
  auto [x, labels] = batch(512);
  Tensor predicted = argmax(logits_of(x), 1);
  return mean(eq(predicted.to(DType::Float64), labels.to(DType::Float64))).item();
}

// Causal self-attention over 4 heads: every position attends to itself and the positions before it.
Tensor causal_self_attention(const Tensor& x /* [batch, time, 32] */) {
  const std::int64_t batch = x.size(0), time = x.size(1);
  auto heads = [&](const Tensor& t) { return t.reshape({batch, time, 4, 8}).transpose(1, 2); };  // [B, 4, T, 8]
  Tensor q = heads(x), k = heads(x), v = heads(x);
  Tensor attended = scaled_dot_product_attention(q, k, v, AttentionMask(), 0.0, /*is_causal=*/true);
  return attended.transpose(1, 2).reshape({batch, time, 32});
}
// DOC-END

TEST_CASE("docs/sequence.md: the LSTM classifier learns its task") {
  CHECK(train_sequence_classifier(150) > 0.9);
}

TEST_CASE("docs/sequence.md: causal attention sees only the past") {
  manual_seed(1);
  Tensor x = randn({2, 6, 32});
  Tensor y = causal_self_attention(x);
  // Changing the last position changes no earlier output.
  Tensor changed = x.clone();
  changed.narrow(1, 5, 1).fill_(7.0);
  Tensor y2 = causal_self_attention(changed);
  CHECK(tapegrad::testing::allclose(y.narrow(1, 0, 5), y2.narrow(1, 0, 5), 0.0, 0.0));
  CHECK_FALSE(tapegrad::testing::allclose(y.narrow(1, 5, 1), y2.narrow(1, 5, 1)));
  // The first position attends only to itself: its output is its own value.
  CHECK(tapegrad::testing::allclose(y.narrow(1, 0, 1), x.narrow(1, 0, 1), 1e-6, 1e-6));
}

TEST_CASE("docs/sequence.md quotes this file's example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_sequence.cpp", "docs/sequence.md");
}
