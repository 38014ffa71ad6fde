// Round trips of real models: random stacks of Linear, Conv2d, BatchNorm and LayerNorm, after training steps.
#include <sstream>

#include <tapegrad/framework/serialize/checkpoint.h>
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::identical;

namespace {

// A random stack built from `choices`; the same choices with another seed give the same architecture.
std::shared_ptr<nn::Sequential> build(const std::vector<int>& choices, bool conv, std::uint64_t seed) {
  Generator g(seed);
  auto model = std::make_shared<nn::Sequential>();
  const std::int64_t width = 3;
  if (conv) model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{2, width, 3}.with_padding(1).with_generator(g)));
  else model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{4, width}.with_generator(g)));
  for (int choice : choices) {
    switch (choice) {
      case 0:
        if (conv) model->push_back(std::make_shared<nn::BatchNorm2d>(width));
        else model->push_back(std::make_shared<nn::BatchNorm1d>(width));
        break;
      case 1:
        if (conv) model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{width, width, 1}.with_generator(g)));
        else model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{width, width}.with_generator(g)));
        break;
      case 2:
        if (!conv) model->push_back(std::make_shared<nn::LayerNorm>(Shape{width}));
        break;
      default: model->push_back(std::make_shared<nn::ReLU>());
    }
  }
  return model;
}

}  // namespace

TEST_CASE("random models round-trip bit-identically, running statistics included") {
  rc::prop("save then load into a fresh model", [] {
    const bool conv = *rc::gen::arbitrary<bool>();
    auto choices = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 4));
    choices.push_back(0);  // at least one BatchNorm
    const bool text = *rc::gen::arbitrary<bool>();
    auto model = build(choices, conv, 1);
    Generator data(7);
    const Shape input_shape = conv ? Shape{4, 2, 5, 5} : Shape{6, 4};
    model->train();
    for (int step = 0; step < 3; ++step) (void)model->forward(randn(input_shape, data));  // moves running stats
    model->eval();

    std::stringstream stream;
    save(*model, stream, text ? ArchiveKind::Text : ArchiveKind::Binary);
    auto fresh = build(choices, conv, 2);
    fresh->eval();
    load(*fresh, stream);
    const auto a = model->state(), b = fresh->state();
    RC_ASSERT(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      RC_ASSERT(a[i].first == b[i].first);
      RC_ASSERT(identical(a[i].second, b[i].second));
    }
    NoGradGuard no_grad;
    const Tensor x = randn(input_shape, data);
    RC_ASSERT(identical(model->forward(x), fresh->forward(x)));
  });
}
