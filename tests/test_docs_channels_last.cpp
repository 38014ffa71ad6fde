// docs/channels_last.md's example, compiled and run: the code between the DOC markers is exactly the page's
// snippet (the last test case checks that), and the other test case asserts what the page claims.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

struct Tour {
  Tensor x, activated, pooled, biased, mixed, flat;
  float first_nhwc_values[2] = {0, 0};
};

Tour channels_last_tour() {
  Tour t;
  Tensor images = arange(0.0, 2 * 3 * 4 * 4, 1.0).reshape({2, 3, 4, 4});  // row-major NCHW
  t.x = images.contiguous(MemoryFormat::ChannelsLast);  // the same values, NHWC in memory
  const float* nhwc = t.x.data<float>(MemoryFormat::ChannelsLast);  // data<float>() would refuse it
  t.first_nhwc_values[0] = nhwc[0];  // element (0, 0, 0, 0)
  t.first_nhwc_values[1] = nhwc[1];  // element (0, 1, 0, 0): the channel is innermost

  // Elementwise ops, activations and pools keep the format (and so do their gradients).
  t.activated = relu(sub(t.x, 10.0));
  t.pooled = max_pool2d(t.activated, 2);
  // Binary ops follow PyTorch's TensorIterator: a broadcast bias leaves the format to the other operand; with
  // two full-size operands in different formats the first one decides (here row-major).
  t.biased = add(t.pooled, ones({1, 3, 1, 1}));
  t.mixed = add(images, t.x);
  // Every other op reads it through contiguous(); view cannot flatten it (as in PyTorch), reshape copies.
  t.flat = t.pooled.reshape({2, -1});
  return t;
}
// DOC-END

TEST_CASE("the channels-last tour does what the page says") {
  const Tour t = channels_last_tour();
  CHECK(t.x.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(!t.x.is_contiguous());
  CHECK(t.x.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(t.x.strides() == Shape{48, 1, 12, 3});
  CHECK(t.first_nhwc_values[0] == 0.0f);
  CHECK(t.first_nhwc_values[1] == 16.0f);
  for (const Tensor& kept : {t.activated, t.pooled, t.biased}) {
    CHECK(kept.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(!kept.is_contiguous());
  }
  CHECK(t.mixed.is_contiguous());
  CHECK(t.mixed.to_vector() == mul(t.x, 2.0).to_vector());
  CHECK(t.flat.is_contiguous());
  CHECK(t.flat.to_vector() == t.pooled.contiguous().to_vector());
  CHECK_THROWS(t.pooled.view({2, -1}));
  CHECK_THROWS(t.x.data<float>());
}

TEST_CASE("docs/channels_last.md quotes this example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/test_docs_channels_last.cpp", "docs/channels_last.md");
}
