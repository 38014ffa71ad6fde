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

// DOC-BEGIN packing
// Sentences of 5, 2 and 3 tokens (8 features each), in no particular order, through a bidirectional GRU
// without padding compute: pack, run, and read each sentence's last states or the padded outputs.
std::pair<Tensor, Tensor> encode_sentences(nn::GRU& gru, const std::vector<Tensor>& sentences) {
  nn::PackedSequence packed = nn::pack_sequence(sentences, /*enforce_sorted=*/false);
  nn::PackedRNNResult r = gru.forward_with_state(packed);    // r.h_n: [2, 3, 16], in the sentences' order
  auto [padded, lengths] = nn::pad_packed_sequence(r.output);  // [5, 3, 32], zeros past each sentence's end
  Tensor summary = cat({r.h_n.select(0, 0), r.h_n.select(0, 1)}, 1);  // [3, 32]: forward end, reverse start
  return {padded, summary};
}
// DOC-END packing

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

TEST_CASE("docs/sequence.md: a packed batch encodes each sentence as if alone") {
  manual_seed(2);
  nn::GRU gru(nn::GRUOptions(8, 16).with_bidirectional(true));
  const std::vector<Tensor> sentences = {randn({5, 8}), randn({2, 8}), randn({3, 8})};
  auto [padded, summary] = encode_sentences(gru, sentences);
  CHECK(padded.shape() == Shape{5, 3, 32});
  CHECK(summary.shape() == Shape{3, 32});
  for (std::int64_t b = 0; b < 3; ++b) {
    const std::int64_t length = sentences[static_cast<std::size_t>(b)].size(0);
    const nn::RNNResult alone = gru.forward_with_state(sentences[static_cast<std::size_t>(b)].unsqueeze(1));
    CHECK(tapegrad::testing::allclose(padded.narrow(0, 0, length).narrow(1, b, 1), alone.output, 1e-5, 1e-6));
    CHECK(tapegrad::testing::allclose(summary.select(0, b), cat({alone.h_n.select(0, 0), alone.h_n.select(0, 1)}, 1).select(0, 0), 1e-5, 1e-6));
    if (length < 5) CHECK(max(abs(padded.narrow(0, length, 5 - length).narrow(1, b, 1))).item() == 0.0);
  }
}

TEST_CASE("docs/sequence.md quotes this file's packing example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_sequence.cpp", "docs/sequence.md", "packing");
}
