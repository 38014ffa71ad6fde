// GroupNorm, InstanceNorm1d/2d and BatchNorm3d: options and names, float64 gradient properties, the testing kit's
// buffer rules (as BatchNorm's), the running-statistics rule of InstanceNorm, and error messages.
#include <cmath>

#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

std::vector<std::string> names(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}

// [N, C] followed by `spatial` extents, each in [2, 4) so that every instance has more than one value.
Shape gen_shape(std::int64_t channels, int spatial) {
  Shape s{*rc::gen::inRange<std::int64_t>(1, 4), channels};
  for (int i = 0; i < spatial; ++i) s.push_back(*rc::gen::inRange<std::int64_t>(2, 4));
  return s;
}

// True when each of the N * blocks contiguous runs of an [N, C, ...] input (one per sample and instance, or per
// sample and group) has a standard deviation of at least 0.1. Note: 1/sigma is steep in a nearly constant
// run, and the second-order check's finite differences lose their accuracy there (a shrunk case with a spread
// of 0.008 missed by 0.5%): such inputs test the check, not the layer.
bool blocks_spread_out(const Tensor& x, std::int64_t blocks) {
  const std::vector<double> v = x.to_vector();
  const auto count = static_cast<std::size_t>(x.size(0) * blocks);
  const std::size_t size = v.size() / count;
  if (size < 2) return true;  // a run of one value normalises to 0 whatever it is
  for (std::size_t b = 0; b < count; ++b) {
    double mean = 0, squares = 0;
    for (std::size_t i = b * size; i < (b + 1) * size; ++i) mean += v[i] / static_cast<double>(size);
    for (std::size_t i = b * size; i < (b + 1) * size; ++i) squares += (v[i] - mean) * (v[i] - mean);
    if (squares / static_cast<double>(size) < 0.01) return false;
  }
  return true;
}

// A float64 input of gen_shape(channels, spatial) whose normalised runs are spread out (see above).
rc::Gen<Tensor> spread_input(std::int64_t channels, int spatial, std::int64_t blocks) {
  return rc::gen::suchThat(gen::tensor_of_shape(gen_shape(channels, spatial)),
                           [blocks](const Tensor& x) { return blocks_spread_out(x, blocks); });
}

nn::InstanceNormOptions gen_instance_options(std::int64_t channels) {
  const double momenta[] = {0.1, 0.5, 1.0};
  const double epsilons[] = {1e-5, 1e-3, 0.1};
  return nn::InstanceNormOptions{channels}
      .with_momentum(momenta[*rc::gen::inRange(0, 3)])
      .with_eps(epsilons[*rc::gen::inRange(0, 3)])
      .with_affine(*rc::gen::arbitrary<bool>())
      .with_track_running_stats(*rc::gen::arbitrary<bool>());
}

std::shared_ptr<nn::InstanceNormBase> make_instance_norm(int spatial, const nn::InstanceNormOptions& o) {
  if (spatial == 1) return std::make_shared<nn::InstanceNorm1d>(o);
  return std::make_shared<nn::InstanceNorm2d>(o);
}

// Per-(sample, channel) mean and unbiased variance of [N, C, *], by plain loops.
void instance_moments(const Tensor& x, std::vector<double>& means, std::vector<double>& unbiased) {
  const std::vector<double> v = x.to_vector();
  const std::int64_t planes = x.size(0) * x.size(1), s = x.numel() / planes;
  means.assign(static_cast<std::size_t>(planes), 0.0);
  unbiased.assign(static_cast<std::size_t>(planes), 0.0);
  for (std::int64_t p = 0; p < planes; ++p) {
    double sum = 0, squares = 0;
    for (std::int64_t i = 0; i < s; ++i) sum += v[static_cast<std::size_t>(p * s + i)];
    const double m = sum / static_cast<double>(s);
    for (std::int64_t i = 0; i < s; ++i) {
      const double d = v[static_cast<std::size_t>(p * s + i)] - m;
      squares += d * d;
    }
    means[static_cast<std::size_t>(p)] = m;
    unbiased[static_cast<std::size_t>(p)] = squares / static_cast<double>(s - 1);
  }
}

// A random stack of normalisation layers with ReLUs between, and its input shape.
struct RandomModel {
  std::shared_ptr<nn::Sequential> model;
  Shape input_shape;
};

RandomModel gen_model() {
  RandomModel r;
  r.model = std::make_shared<nn::Sequential>();
  const int spatial = *rc::gen::inRange(1, 3);
  const std::int64_t groups = *rc::gen::inRange<std::int64_t>(1, 3), channels = groups * *rc::gen::inRange<std::int64_t>(1, 3);
  r.input_shape = gen_shape(channels, spatial);
  const int blocks = *rc::gen::inRange(1, 4);
  for (int i = 0; i < blocks; ++i) {
    if (*rc::gen::arbitrary<bool>())
      r.model->push_back(make_instance_norm(spatial, gen_instance_options(channels)));
    else
      r.model->push_back(std::make_shared<nn::GroupNorm>(
          nn::GroupNormOptions{groups, channels}.with_affine(*rc::gen::arbitrary<bool>())));
    r.model->push_back(std::make_shared<nn::ReLU>());
  }
  r.model->to(DType::Float64);
  return r;
}

}  // namespace

// ---------------------------------------------------------------- GroupNorm

TEST_CASE("GroupNorm has PyTorch's defaults, names and printing, and no buffers") {
  nn::GroupNorm gn(2, 4);
  CHECK(names(gn.state()) == std::vector<std::string>{"weight", "bias"});
  CHECK(gn.buffers().empty());
  CHECK(gn.weight.to_vector() == std::vector<double>(4, 1.0));
  CHECK(gn.bias.to_vector() == std::vector<double>(4, 0.0));
  CHECK(gn.weight.dtype() == DType::Float32);
  CHECK(gn.options().eps == 1e-5);
  CHECK(gn.extra_repr() == "2, 4, eps=1e-05, affine=true");
  nn::GroupNorm plain(nn::GroupNormOptions{3, 6}.with_affine(false).with_dtype(DType::Float64));
  CHECK(plain.state().empty());
  CHECK(plain(randn({2, 6, 3}, default_generator(), f64)).dtype() == DType::Float64);
}

TEST_CASE("GroupNorm normalises each group of each sample") {
  nn::GroupNorm gn(nn::GroupNormOptions{2, 4}.with_dtype(DType::Float64));
  // sample 0: group 0 holds channels 0-1 = {1, 3}, group 1 channels 2-3 = {10, 10} (zero variance)
  const Tensor x = tensor({1, 3, 10, 10, 0, 2, 4, 6}, {2, 4}, f64);
  // every other group holds two values 2 apart: mean in the middle, biased variance 1
  const double s = 1 / std::sqrt(1 + 1e-5);
  CHECK(allclose(gn(x), tensor({-s, s, 0, 0, -s, s, -s, s}, {2, 4}, f64), 1e-12));
  CHECK_THROWS_WITH(nn::GroupNorm(3, 4),
                    "GroupNorm: num_channels must be divisible by num_groups, got num_channels=4 and num_groups=3");
  CHECK_THROWS_WITH(gn(zeros({2, 5}, f64)), "GroupNorm: expected 4 channels, got input [2, 5]");
  CHECK_THROWS_WITH(gn(zeros({4}, f64)), "GroupNorm: expected input [N, C, *] with at least 2 dims, got [4]");
  CHECK_THROWS_WITH(gn(zeros({2, 4})), Catch::Contains("is float32 but the layer is float64"));
}

TEST_CASE("GroupNorm(1, C) is a LayerNorm over [C, *] and GroupNorm(C, C) an InstanceNorm, with per-channel affine") {
  rc::prop("both identities on random inputs", [] {
    const std::int64_t c = *rc::gen::inRange<std::int64_t>(1, 5);
    const Shape shape = gen_shape(c, *rc::gen::inRange(1, 3));
    const Tensor x = *gen::tensor_of_shape(shape);
    nn::GroupNorm one(nn::GroupNormOptions{1, c}.with_affine(false).with_dtype(DType::Float64));
    const Shape tail(shape.begin() + 1, shape.end());
    RC_ASSERT(allclose(one(x), layer_norm(x, tail), 1e-12, 1e-12));
    nn::GroupNorm per_channel(nn::GroupNormOptions{c, c}.with_dtype(DType::Float64));
    {
      NoGradGuard no_grad;
      per_channel.weight.copy_(*gen::tensor_of_shape({c}));
      per_channel.bias.copy_(*gen::tensor_of_shape({c}));
    }
    auto instance = make_instance_norm(static_cast<int>(shape.size()) - 2,
                                       nn::InstanceNormOptions{c}.with_affine(true).with_dtype(DType::Float64));
    instance->load_state(per_channel.state());
    RC_ASSERT(allclose(per_channel(x), (*instance)(x), 1e-10, 1e-12));
  });
}

TEST_CASE("GroupNorm gradients are right in input, weight and bias (float64)") {
  auto spatial = std::make_shared<int>(0);
  auto channels = std::make_shared<std::int64_t>(0);
  auto group_count = std::make_shared<std::int64_t>(0);
  const tapegrad::testing::ModuleFactory make = [=] {
    const std::int64_t groups = *rc::gen::inRange<std::int64_t>(1, 4);
    *group_count = groups;
    *channels = groups * *rc::gen::inRange<std::int64_t>(1, 3);
    *spatial = *rc::gen::inRange(0, 3);
    return std::make_shared<nn::GroupNorm>(nn::GroupNormOptions{groups, *channels}
                                               .with_affine(*rc::gen::arbitrary<bool>())
                                               .with_eps(*rc::gen::element(1e-5, 1e-3, 0.1)));
  };
  tapegrad::testing::check_module_gradients(
      make, rc::gen::exec([=] { return *spread_input(*channels, *spatial, *group_count); }),
      {.second_order = true, .label = "GroupNorm"});
}

// ---------------------------------------------------------------- InstanceNorm

TEST_CASE("InstanceNorm has PyTorch's defaults, names and printing") {
  nn::InstanceNorm2d plain(3);
  CHECK(plain.state().empty());
  CHECK(plain.extra_repr() == "3, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false");
  nn::InstanceNorm1d full(nn::InstanceNormOptions{4}.with_affine(true).with_track_running_stats(true));
  CHECK(names(full.state()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(names(full.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(full.running_mean.to_vector() == std::vector<double>(4, 0.0));
  CHECK(full.running_var.to_vector() == std::vector<double>(4, 1.0));
  CHECK(full.num_batches_tracked.dtype() == DType::Int64);
  CHECK(full.num_batches_tracked.dim() == 0);
  for (const Tensor& b : full.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK(full.extra_repr() == "4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
}

TEST_CASE("InstanceNorm normalises each (sample, channel) plane; unbatched input is a batch of one") {
  rc::prop("against per-plane statistics computed by loops", [] {
    const int spatial = *rc::gen::inRange(1, 3);
    const std::int64_t c = *rc::gen::inRange<std::int64_t>(1, 4);
    const Tensor x = *gen::tensor_of_shape(gen_shape(c, spatial));
    auto norm = make_instance_norm(spatial, nn::InstanceNormOptions{c}.with_dtype(DType::Float64));
    std::vector<double> means, unbiased;
    instance_moments(x, means, unbiased);
    const std::int64_t s = x.numel() / (x.size(0) * c);
    std::vector<double> expected = x.to_vector();
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const auto p = i / static_cast<std::size_t>(s);
      const double biased = unbiased[p] * static_cast<double>(s - 1) / static_cast<double>(s);
      expected[i] = (expected[i] - means[p]) / std::sqrt(biased + 1e-5);
    }
    RC_ASSERT(allclose((*norm)(x), from_vector(expected, x.shape(), f64), 1e-10, 1e-12));
    norm->eval();  // no tracking: eval uses the instance statistics too
    RC_ASSERT(allclose((*norm)(x), from_vector(expected, x.shape(), f64), 1e-10, 1e-12));
    const Tensor first = slice(x, 0, 0, 1);
    const Shape unbatched(x.shape().begin() + 1, x.shape().end());
    RC_ASSERT(identical((*norm)(first.reshape(unbatched)), (*norm)(first).reshape(unbatched)));
  });
}

TEST_CASE("InstanceNorm's running statistics follow PyTorch's rule, with and without grad mode") {
  rc::prop("running = (1 - m) running + m * (batch average of instance mean / unbiased variance)", [] {
    const int spatial = *rc::gen::inRange(1, 3);
    const std::int64_t c = *rc::gen::inRange<std::int64_t>(1, 4);
    auto options = gen_instance_options(c).with_track_running_stats(true).with_dtype(DType::Float64);
    auto norm = make_instance_norm(spatial, options);
    const bool grad_mode = *rc::gen::arbitrary<bool>();
    for (int step = 0; step < 2; ++step) {
      const Tensor x = *gen::tensor_of_shape(gen_shape(c, spatial), -3.0, 3.0);
      const std::vector<double> rm = norm->running_mean.to_vector(), rv = norm->running_var.to_vector();
      std::vector<double> means, unbiased;
      instance_moments(x, means, unbiased);
      const std::int64_t n = x.size(0);
      std::vector<double> expected_mean(static_cast<std::size_t>(c)), expected_var(static_cast<std::size_t>(c));
      for (std::int64_t k = 0; k < c; ++k) {
        double m = 0, v = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          m += means[static_cast<std::size_t>(i * c + k)] / static_cast<double>(n);
          v += unbiased[static_cast<std::size_t>(i * c + k)] / static_cast<double>(n);
        }
        const double f = options.momentum;
        expected_mean[static_cast<std::size_t>(k)] = (1 - f) * rm[static_cast<std::size_t>(k)] + f * m;
        expected_var[static_cast<std::size_t>(k)] = (1 - f) * rv[static_cast<std::size_t>(k)] + f * v;
      }
      if (grad_mode) {
        (*norm)(x.detach().clone().requires_grad_(true));
      } else {
        NoGradGuard no_grad;
        (*norm)(x);
      }
      RC_ASSERT(allclose(norm->running_mean, from_vector(expected_mean, {c}, f64), 1e-12, 1e-13));
      RC_ASSERT(allclose(norm->running_var, from_vector(expected_var, {c}, f64), 1e-12, 1e-13));
      RC_ASSERT(norm->num_batches_tracked.item() == 0);  // PyTorch 1.13's InstanceNorm never counts
      RC_ASSERT(!norm->running_mean.requires_grad() && !norm->running_var.requires_grad());
    }
    // eval with tracking normalises with the running statistics
    norm->eval();
    const Tensor x = *gen::tensor_of_shape(gen_shape(c, spatial));
    Shape channel(x.shape().size(), 1);
    channel[1] = c;
    Tensor expected = (x - norm->running_mean.reshape(channel)) / sqrt(norm->running_var.reshape(channel) + options.eps);
    if (options.affine) expected = expected * norm->weight.reshape(channel) + norm->bias.reshape(channel);
    RC_ASSERT(allclose((*norm)(x), expected, 1e-10, 1e-12));
  });
}

TEST_CASE("InstanceNorm gradients are right in input, weight and bias, in training and eval (float64)") {
  for (const int spatial : {1, 2}) {
    auto channels = std::make_shared<std::int64_t>(0);
    const tapegrad::testing::ModuleFactory make = [=] {
      *channels = *rc::gen::inRange<std::int64_t>(1, 4);
      auto norm = make_instance_norm(spatial, gen_instance_options(*channels));
      if (norm->options().track_running_stats) {
        // running statistics other than 0 and 1, so that eval's constants matter
        NoGradGuard no_grad;
        norm->running_mean.copy_(uniform({*channels}, -1.0, 1.0));
        norm->running_var.copy_(uniform({*channels}, 0.5, 2.0));
      }
      return std::shared_ptr<nn::Module>(norm);
    };
    tapegrad::testing::check_module_gradients(
        make, rc::gen::exec([=] { return *spread_input(*channels, spatial, *channels); }),
        {.second_order = true, .label = fmt::format("InstanceNorm{}d", spatial)});
  }
}

TEST_CASE("random GroupNorm/InstanceNorm stacks keep every buffer rule of the testing kit") {
  // The same rules as BatchNorm's (test_batch_norm_buffers.cpp): eval forwards and no-grad eval forwards leave
  // every buffer bit-identical, buffers never require grad and are never parameters, backward never writes them.
  auto input_shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make = [input_shape] {
    RandomModel r = gen_model();
    *input_shape = r.input_shape;
    return std::shared_ptr<nn::Module>(r.model);
  };
  tapegrad::testing::check_buffer_invariance(
      make, rc::gen::exec([input_shape] { return *gen::tensor_of_shape(*input_shape, -3.0, 3.0); }),
      {.statistics_of = tapegrad::testing::statistics_present({"running_mean", "running_var"})});
}

TEST_CASE("bad inputs to InstanceNorm give PyTorch's and tapegrad's messages") {
  nn::InstanceNorm1d in1(nn::InstanceNormOptions{3}.with_affine(true));
  CHECK_THROWS_WITH(in1(randn({4, 3, 1})), "Expected more than 1 spatial element when training, got input size [4, 3, 1]");
  CHECK_THROWS_WITH(in1(randn({2, 3, 4, 4})),
                    "InstanceNorm1d: expected 2-D input [C, L] or 3-D input [N, C, L], got [2, 3, 4, 4]");
  CHECK_THROWS_WITH(in1(randn({2, 5, 4})), "InstanceNorm1d: expected 3 channels, got input [2, 5, 4]");
  CHECK_THROWS_WITH(in1(randn({2, 3, 4}, default_generator(), f64)),
                    Catch::Contains("is float64 but the layer is float32"));
  nn::InstanceNorm2d in2(2);
  CHECK_THROWS_WITH(in2(randn({2, 2})), "InstanceNorm2d: expected 3-D input [C, H, W] or 4-D input [N, C, H, W], got [2, 2]");
  CHECK_NOTHROW(in2(randn({2, 5, 2, 2})));  // no per-channel tensor: PyTorch 1.13 accepts any channel count
  nn::InstanceNorm2d tracked(nn::InstanceNormOptions{2}.with_track_running_stats(true));
  tracked.eval();
  CHECK_NOTHROW(tracked(randn({1, 2, 1, 1})));  // eval with running statistics needs no instance statistics
  CHECK_THROWS_WITH(nn::InstanceNorm1d(0), "InstanceNorm1d: num_features must be positive, got 0");
}

// ---------------------------------------------------------------- BatchNorm3d and BatchNormOptions::dtype

TEST_CASE("BatchNorm3d has BatchNorm's names and normalises [N, C, D, H, W] per channel") {
  nn::BatchNorm3d bn(nn::BatchNormOptions{3}.with_dtype(DType::Float64));
  CHECK(names(bn.state()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked", "frozen"});
  for (const auto& [name, t] : bn.state())
    CHECK(t.dtype() == (name == "num_batches_tracked" || name == "frozen" ? DType::Int64 : DType::Float64));
  CHECK(bn.extra_repr() == "3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
  const Tensor x = randn({2, 3, 2, 3, 2}, default_generator(), f64) * 2.0 + 1.0;
  nn::BatchNorm1d flat(nn::BatchNormOptions{3}.with_dtype(DType::Float64));
  const Tensor y = bn(x), expected = flat(x.reshape({2, 3, 12})).reshape(x.shape());
  CHECK(identical(y, expected));
  CHECK(identical(bn.running_var, flat.running_var));
  bn.eval();
  flat.eval();
  CHECK(identical(bn(x), flat(x.reshape({2, 3, 12})).reshape(x.shape())));
  CHECK_THROWS_WITH(bn(randn({2, 3, 4, 4}, default_generator(), f64)),
                    "BatchNorm3d: expected 5-D input [N, C, D, H, W], got [2, 3, 4, 4]");
  bn.train();
  CHECK_THROWS_WITH(bn(randn({1, 3, 1, 1, 1}, default_generator(), f64)),
                    "Expected more than 1 value per channel when training, got input size [1, 3, 1, 1, 1]");
  CHECK_THROWS_WITH(nn::BatchNorm2d(nn::BatchNormOptions{2}.with_dtype(DType::Int64)),
                    "BatchNorm2d: dtype must be float32 or float64, got int64");
}

TEST_CASE("BatchNorm3d gradients are right and it keeps BatchNorm's buffer rules (float64)") {
  auto channels = std::make_shared<std::int64_t>(0);
  const tapegrad::testing::ModuleFactory make = [=] {
    *channels = *rc::gen::inRange<std::int64_t>(1, 4);
    return std::make_shared<nn::BatchNorm3d>(nn::BatchNormOptions{*channels}
                                                 .with_affine(*rc::gen::arbitrary<bool>())
                                                 .with_track_running_stats(*rc::gen::arbitrary<bool>())
                                                 .with_dtype(DType::Float64));
  };
  const auto inputs = rc::gen::exec([=] { return *gen::tensor_of_shape(gen_shape(*channels, 3)); });
  tapegrad::testing::check_module_gradients(make, inputs, {.label = "BatchNorm3d"});
  tapegrad::testing::check_buffer_invariance(
      make, inputs,
      {.statistics_of = tapegrad::testing::statistics_present({"running_mean", "running_var", "num_batches_tracked"}),
       .label = "BatchNorm3d"});
}
