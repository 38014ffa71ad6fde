// Every built-in layer passes the kit's checks (testing.h): gradients with respect to input and parameters in
// both modes, and every buffer rule. Options and shapes are random and small.
#include <memory>

#include "support/properties.h"
#include "support/spread_input.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using testing::BufferInvarianceOptions;
using testing::GradientCheckOptions;

namespace {

// What a factory drew, for the input generator of the same case to read (the kit makes the module first).
struct Drawn {
  Shape input;
};

rc::Gen<Tensor> input_of(const std::shared_ptr<Drawn>& drawn, double low = -2.0, double high = 2.0) {
  return rc::gen::exec([=] { return *gen::tensor_of_shape(drawn->input, low, high); });
}

// Values at least 0.01 apart (a ramp wider than the random range), so max-pool windows have no near-ties.
rc::Gen<Tensor> distinct_input_of(const std::shared_ptr<Drawn>& drawn) {
  return rc::gen::exec([=] {
    Tensor x = *gen::tensor_of_shape(drawn->input, -2.0, 2.0);
    double* p = x.data<double>();
    for (std::int64_t i = 0; i < x.numel(); ++i) p[i] += 4.01 * static_cast<double>((i * 7) % x.numel());
    return x;
  });
}

// BatchNorm inputs: no channel's variance is near 0 (support/spread_input.h).
rc::Gen<Tensor> spread_input_of(const std::shared_ptr<Drawn>& drawn) {
  return rc::gen::exec([=] { return testing::spread_input(drawn->input); });
}

std::int64_t draw(std::int64_t low, std::int64_t high, const char* name = "size") {
  return *rc::gen::inRange<std::int64_t>(low, high + 1).as(name);
}

nn::BatchNormOptions draw_batch_norm_options(std::int64_t channels) {
  nn::BatchNormOptions o;
  o.num_features = channels;
  const int momentum = *rc::gen::inRange(0, 3).as("momentum (0: 0.1, 1: 0.5, 2: none, cumulative)");
  o.momentum = momentum == 2 ? std::nullopt : std::optional<double>(momentum == 0 ? 0.1 : 0.5);
  o.affine = *rc::gen::arbitrary<bool>().as("affine");
  o.track_running_stats = *rc::gen::arbitrary<bool>().as("track_running_stats");
  o.eps = *rc::gen::element(1e-5, 0.1).as("eps");
  return o;
}

// The module's BatchNorm layer, if any (alone or in a Sequential).
const nn::BatchNormBase* batch_norm_in(const nn::Module& m) {
  for (auto& [prefix, child] : const_cast<nn::Module&>(m).named_modules())
    if (const auto* bn = dynamic_cast<const nn::BatchNormBase*>(child)) return bn;
  return nullptr;
}


// BatchNorm's momentum for one step from its current state: cumulative (none) is 1 / (count + 1).
std::optional<double> batch_norm_momentum(const nn::Module& m) {
  const nn::BatchNormBase* bn = batch_norm_in(m);
  if (bn == nullptr || !bn->options().track_running_stats) return std::nullopt;
  if (bn->options().momentum) return *bn->options().momentum;
  return 1.0 / (bn->num_batches_tracked.item() + 1);
}

BufferInvarianceOptions batch_norm_rules(std::vector<std::string> extra = {}) {
  // Note: BatchNorm without track_running_stats has no running statistics; listing them would be an error.
  std::vector<std::string> names{"running_mean", "running_var", "num_batches_tracked"};
  names.insert(names.end(), extra.begin(), extra.end());
  return {.statistics_of = testing::statistics_present(std::move(names)),
          .momentum = batch_norm_momentum,
          .momentum_statistics = {"running_mean", "running_var"},
          .label = "buffers"};
}

}  // namespace

TEST_CASE("Linear passes the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn] {
    const std::int64_t in = draw(1, 4), out = draw(1, 4);
    drawn->input = *gen::shape(0, 2, 1, 3);
    drawn->input.push_back(in);
    return std::make_shared<nn::Linear>(nn::LinearOptions{in, out, *rc::gen::arbitrary<bool>()});
  };
  testing::check_module_gradients(make, input_of(drawn), {.second_order = true, .label = "gradients"});
  testing::check_buffer_invariance(make, input_of(drawn), {.label = "buffers"});
}

TEST_CASE("Conv2d passes the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn] {
    const std::int64_t groups = draw(1, 2), in = groups * draw(1, 2), out = groups * draw(1, 2);
    const std::int64_t kernel = draw(1, 3), padding = draw(0, 1), stride = draw(1, 2);
    drawn->input = {draw(1, 2), in, draw(kernel, kernel + 2), draw(kernel, kernel + 2)};
    return std::make_shared<nn::Conv2d>(nn::Conv2dOptions{in, out, kernel}
                                            .with_padding(padding)
                                            .with_stride(stride)
                                            .with_groups(groups)
                                            .with_bias(*rc::gen::arbitrary<bool>()));
  };
  testing::check_module_gradients(make, input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, input_of(drawn), {.label = "buffers"});
}

TEST_CASE("BatchNorm1d and BatchNorm2d pass the kit, with every option") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn]() -> std::shared_ptr<nn::Module> {
    const std::int64_t channels = draw(1, 3, "channels"), spatial = draw(0, 2, "spatial dimensions");
    drawn->input = {draw(2, 3, "batch"), channels};
    for (std::int64_t i = 0; i < spatial; ++i) drawn->input.push_back(draw(1, 2));
    const nn::BatchNormOptions options = draw_batch_norm_options(channels);
    if (spatial == 2) return std::make_shared<nn::BatchNorm2d>(options);
    return std::make_shared<nn::BatchNorm1d>(options);
  };
  testing::check_module_gradients(make, spread_input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, spread_input_of(drawn), batch_norm_rules());
}

TEST_CASE("LayerNorm passes the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn] {
    drawn->input = *gen::shape(1, 3, 2, 3);
    const auto k = *rc::gen::inRange<std::size_t>(1, drawn->input.size() + 1);
    const Shape normalized(drawn->input.end() - static_cast<std::ptrdiff_t>(k), drawn->input.end());
    return std::make_shared<nn::LayerNorm>(
        nn::LayerNormOptions{normalized}.with_elementwise_affine(*rc::gen::arbitrary<bool>()));
  };
  testing::check_module_gradients(make, input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, input_of(drawn), {.label = "buffers"});
}

TEST_CASE("Dropout passes the kit: its stream position is its only statistic") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn] {
    drawn->input = *gen::shape(1, 3);
    return std::make_shared<nn::Dropout>(*rc::gen::element(0.0, 0.25, 0.5));
  };
  // Note: the kit restores the buffers before every evaluation, so training mode draws the same mask each time.
  testing::check_module_gradients(make, input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, input_of(drawn), {.statistics = {"num_masks_drawn"}, .label = "buffers"});
}

TEST_CASE("pooling layers pass the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn]() -> std::shared_ptr<nn::Module> {
    const int kind = *rc::gen::inRange(0, 3);
    const std::int64_t kernel = draw(1, 2);
    drawn->input = {draw(1, 2), draw(1, 2), draw(kernel, 4), draw(kernel, 4)};
    if (kind == 0) return std::make_shared<nn::MaxPool2d>(nn::MaxPool2dOptions{kernel}.with_stride(draw(1, 2)));
    if (kind == 1) return std::make_shared<nn::AvgPool2d>(nn::AvgPool2dOptions{kernel}.with_padding(kernel / 2));
    return std::make_shared<nn::AdaptiveAvgPool2d>(IntPair{draw(1, 3), draw(1, 3)});
  };
  testing::check_module_gradients(make, distinct_input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, distinct_input_of(drawn), {.label = "buffers"});
}

TEST_CASE("activations and Flatten pass the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn]() -> std::shared_ptr<nn::Module> {
    drawn->input = *gen::shape(1, 3, 1, 4);
    switch (*rc::gen::inRange(0, 9)) {
      case 0: return std::make_shared<nn::ReLU>();
      case 1: return std::make_shared<nn::LeakyReLU>(*rc::gen::element(0.01, 0.3));
      case 2: return std::make_shared<nn::GELU>();
      case 3: return std::make_shared<nn::GELU>("tanh");
      case 4: return std::make_shared<nn::Sigmoid>();
      case 5: return std::make_shared<nn::Tanh>();
      case 6: return std::make_shared<nn::Softmax>(-1);
      case 7: return std::make_shared<nn::LogSoftmax>(-1);
      default: return std::make_shared<nn::Flatten>(0, -1);
    }
  };
  // Note: values keep 1e-3 away from 0, the kink of ReLU and LeakyReLU.
  const rc::Gen<Tensor> inputs = rc::gen::exec([drawn] { return *gen::tensor_of_shape(drawn->input, -2, 2, {0.0}); });
  testing::check_module_gradients(make, inputs, {.label = "gradients"});
  testing::check_buffer_invariance(make, inputs, {.label = "buffers"});
}

TEST_CASE("Sequential models of every layer pass the kit") {
  auto drawn = std::make_shared<Drawn>();
  const testing::ModuleFactory make = [drawn]() -> std::shared_ptr<nn::Module> {
    const std::int64_t channels = draw(1, 2);
    if (*rc::gen::arbitrary<bool>()) {
      drawn->input = {draw(2, 3), draw(1, 3)};
      return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(drawn->input[1], channels),
          std::make_shared<nn::BatchNorm1d>(draw_batch_norm_options(channels)), std::make_shared<nn::Tanh>(),
          std::make_shared<nn::Dropout>(0.25), std::make_shared<nn::LayerNorm>(Shape{channels}),
          std::make_shared<nn::Linear>(channels, 2)});
    }
    drawn->input = {draw(2, 3), 1, draw(2, 3), draw(2, 3)};
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(nn::Conv2dOptions{1, channels, 2}.with_padding(1)),
        std::make_shared<nn::BatchNorm2d>(draw_batch_norm_options(channels)), std::make_shared<nn::GELU>(),
        std::make_shared<nn::AvgPool2d>(2), std::make_shared<nn::Flatten>()});
  };
  testing::check_module_gradients(make, spread_input_of(drawn), {.label = "gradients"});
  testing::check_buffer_invariance(make, spread_input_of(drawn), batch_norm_rules({"num_masks_drawn"}));
}
