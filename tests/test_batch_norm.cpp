// BatchNorm: PyTorch's numbers, gradients to second order, and the buffer invariants that make it safe.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>
#include "support/properties.h"
#include "support/spread_input.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;
using tapegrad::testing::spread_input;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

// ---- the reference file written by tests/reference/make_batchnorm_reference.py ----
std::map<std::string, Tensor> load_reference() {
  const std::string path = std::string(TAPEGRAD_TEST_DATA_DIR) + "/batchnorm_reference.txt";
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  std::map<std::string, Tensor> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape_text, token;
    fields >> key >> shape_text;
    Shape shape;
    if (shape_text != "-") {
      std::istringstream dims(shape_text);
      while (std::getline(dims, token, ',')) shape.push_back(std::stoll(token));
    }
    std::vector<double> values;
    while (fields >> token) values.push_back(std::strtod(token.c_str(), nullptr));
    entries[key] = from_vector(values, shape, f64);
  }
  return entries;
}

std::shared_ptr<nn::BatchNormBase> make_batch_norm(int kind, const nn::BatchNormOptions& options) {
  if (kind == 1) return std::make_shared<nn::BatchNorm1d>(options);
  return std::make_shared<nn::BatchNorm2d>(options);
}

// Values of one channel of an [N, C, ...] tensor.
std::vector<double> channel_values(const Tensor& x, std::int64_t c) {
  const std::vector<double> v = x.to_vector();
  const std::int64_t channels = x.size(1), per_n = x.numel() / x.size(0), s = per_n / channels;
  std::vector<double> out;
  for (std::int64_t n = 0; n < x.size(0); ++n)
    for (std::int64_t i = 0; i < s; ++i) out.push_back(v[static_cast<std::size_t>(n * per_n + c * s + i)]);
  return out;
}

std::map<std::string, Tensor> snapshot(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, b] : model.named_buffers()) out[name] = b.detach().clone();
  return out;
}

bool buffers_identical(const nn::Module& model, const std::map<std::string, Tensor>& before) {
  for (const auto& [name, b] : model.named_buffers())
    if (!identical(b, before.at(name))) return false;
  return true;
}

// Checks one BatchNorm layer's buffers after a training forward on `input`, from the buffers before it,
// with mean and unbiased variance computed here by plain loops.
void check_ema_update(const nn::BatchNormBase& bn, const Tensor& input, const Tensor& mean_before,
                      const Tensor& var_before, double tracked_before) {
  const auto& o = bn.options();
  RC_ASSERT(bn.num_batches_tracked.item() == tracked_before + 1);
  RC_ASSERT(bn.num_batches_tracked.dtype() == DType::Int64);
  const double f = o.momentum ? *o.momentum : 1.0 / (tracked_before + 1);
  const auto rm = mean_before.to_vector(), rv = var_before.to_vector();
  std::vector<double> expected_mean, expected_var;
  for (std::int64_t c = 0; c < o.num_features; ++c) {
    const auto v = channel_values(input, c);
    double sum = 0, squares = 0;
    for (double x : v) sum += x;
    const double m = sum / static_cast<double>(v.size());
    for (double x : v) squares += (x - m) * (x - m);
    expected_mean.push_back((1 - f) * rm[static_cast<std::size_t>(c)] + f * m);
    expected_var.push_back((1 - f) * rv[static_cast<std::size_t>(c)] + f * squares / static_cast<double>(v.size() - 1));
  }
  RC_ASSERT(allclose(bn.running_mean, from_vector(expected_mean, {o.num_features}, f64), 1e-12, 1e-13));
  RC_ASSERT(allclose(bn.running_var, from_vector(expected_var, {o.num_features}, f64), 1e-12, 1e-13));
}

// A random BatchNorm option set.
rc::Gen<nn::BatchNormOptions> gen_options(std::int64_t channels) {
  return rc::gen::apply(
      [channels](int momentum_choice, bool affine, bool track, int eps_choice) {
        nn::BatchNormOptions o;
        o.num_features = channels;
        const double momenta[] = {0.1, 0.01, 0.5, 1.0};
        if (momentum_choice < 4) o.momentum = momenta[momentum_choice]; else o.momentum = std::nullopt;
        o.affine = affine;
        o.track_running_stats = track;
        const double epsilons[] = {1e-5, 1e-3, 0.1};
        o.eps = epsilons[eps_choice];
        return o;
      },
      rc::gen::inRange(0, 5), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), rc::gen::inRange(0, 3));
}

// [N, C] plus 0 to 2 spatial dims, with at least two values per channel.
rc::Gen<Shape> gen_bn_shape(int min_spatial = 0, int max_spatial = 2) {
  return rc::gen::suchThat(
      rc::gen::mapcat(rc::gen::inRange(min_spatial, max_spatial + 1),
                      [](int spatial) {
                        return rc::gen::map(
                            rc::gen::container<Shape>(static_cast<std::size_t>(2 + spatial),
                                                      rc::gen::inRange<std::int64_t>(1, 4)),
                            [](Shape s) { return s; });
                      }),
      [](const Shape& s) { return shape_numel(s) / s[1] >= 2; });
}

struct BnCase {
  Tensor x, weight, bias, mean, var;
  double eps;
  bool affine;
};

BnCase gen_case(int max_spatial) {
  const Shape s = *gen_bn_shape(0, max_spatial);
  BnCase k;
  k.x = spread_input(s);
  const Shape channels{s[1]};
  k.affine = *rc::gen::arbitrary<bool>();
  k.weight = *gen::tensor_of_shape(channels, 0.5, 2.0);
  k.bias = *gen::tensor_of_shape(channels);
  k.mean = *gen::tensor_of_shape(channels);
  k.var = *gen::tensor_of_shape(channels, 0.2, 2.0);
  k.eps = *rc::gen::element(1e-5, 1e-3, 0.1);
  return k;
}

TensorFunction train_function(const BnCase& k) {
  return [k](const std::vector<Tensor>& in) {
    return k.affine ? batch_norm_train(in[0], in[1], in[2], k.eps).output
                    : batch_norm_train(in[0], Tensor(), Tensor(), k.eps).output;
  };
}

TensorFunction eval_function(const BnCase& k) {
  return [k](const std::vector<Tensor>& in) {
    return k.affine ? batch_norm_eval(in[0], k.mean, k.var, in[1], in[2], k.eps)
                    : batch_norm_eval(in[0], k.mean, k.var, Tensor(), Tensor(), k.eps);
  };
}

std::vector<Tensor> case_inputs(const BnCase& k) {
  return k.affine ? std::vector<Tensor>{k.x, k.weight, k.bias} : std::vector<Tensor>{k.x};
}

}  // namespace

// ---------------------------------------------------------------- golden values

TEST_CASE("BatchNorm matches PyTorch's outputs, gradients and running statistics (float64, 1e-10)") {
  const auto ref = load_reference();
  int cases = 0;
  for (const auto& [key, value] : ref) {
    if (key.size() < 7 || key.substr(key.size() - 7) != "/module") continue;
    const std::string name = key.substr(0, key.size() - 7);
    auto get = [&](const std::string& field) -> const Tensor& { return ref.at(name + "/" + field); };
    CAPTURE(name);
    ++cases;
    nn::BatchNormOptions o;
    o.num_features = static_cast<std::int64_t>(get("num_features").item());
    o.eps = get("eps").item();
    o.momentum = get("momentum").item() < 0 ? std::nullopt : std::optional<double>(get("momentum").item());
    o.affine = get("affine").item() != 0;
    o.track_running_stats = get("track_running_stats").item() != 0;
    auto bn = make_batch_norm(static_cast<int>(value.item()), o);
    bn->to(DType::Float64);
    if (o.affine) {
      NoGradGuard no_grad;
      bn->weight.copy_(get("weight_init"));
      bn->bias.copy_(get("bias_init"));
    }
    const int steps = static_cast<int>(get("steps").item());
    for (int step = 0; step < steps; ++step) {
      // Note: appended rather than "s" + std::to_string(step): GCC 12 reports a false -Wrestrict on that form.
      std::string s = "s";
      s += std::to_string(step) + "/";
      CAPTURE(step);
      bn->train(get(s + "train").item() != 0);
      const Tensor x = get(s + "input").clone().requires_grad_(true);
      const Tensor y = (*bn)(x);
      CHECK(allclose(y, get(s + "output")));
      std::vector<Tensor> wrt{x};
      if (o.affine) wrt = {x, bn->weight, bn->bias};
      const auto grads = autograd::grad({y}, wrt, {get(s + "grad_output")});
      CHECK(allclose(grads[0], get(s + "grad_input")));
      if (o.affine) {
        CHECK(allclose(grads[1], get(s + "grad_weight")));
        CHECK(allclose(grads[2], get(s + "grad_bias")));
      }
      if (o.track_running_stats) {
        CHECK(allclose(bn->running_mean, get(s + "running_mean")));
        CHECK(allclose(bn->running_var, get(s + "running_var")));
        CHECK(bn->num_batches_tracked.item() == get(s + "num_batches_tracked").item());
      }
    }
  }
  CHECK(cases == 10);
}

// ---------------------------------------------------------------- gradients

TEST_CASE("BatchNorm gradients are right in training and eval mode (float64)") {
  rc::prop("batch_norm_train wrt input, weight, bias", [] {
    const BnCase k = gen_case(2);
    TAPEGRAD_RC_GRADCHECK(train_function(k), case_inputs(k));
  });
  rc::prop("batch_norm_eval wrt input, weight, bias", [] {
    const BnCase k = gen_case(2);
    TAPEGRAD_RC_GRADCHECK(eval_function(k), case_inputs(k));
  });
}

TEST_CASE("BatchNorm is twice differentiable in training and eval mode (float64)") {
  rc::prop("batch_norm_train second derivatives", [] {
    const BnCase k = gen_case(1);
    TAPEGRAD_RC_GRADGRADCHECK(train_function(k), case_inputs(k));
  });
  rc::prop("batch_norm_eval second derivatives", [] {
    const BnCase k = gen_case(1);
    TAPEGRAD_RC_GRADGRADCHECK(eval_function(k), case_inputs(k));
  });
}

TEST_CASE("the layer's input gradient is right in training and eval mode") {
  rc::prop("BatchNorm1d/2d wrt input, with random weight, bias and running statistics", [] {
    const BnCase k = gen_case(2);
    nn::BatchNormOptions o{k.x.size(1)};
    o.eps = k.eps;
    o.affine = k.affine;
    auto bn = make_batch_norm(k.x.dim() == 4 ? 2 : 1, o);
    bn->to(DType::Float64);
    {
      NoGradGuard no_grad;
      if (k.affine) {
        bn->weight.copy_(k.weight);
        bn->bias.copy_(k.bias);
      }
      bn->running_mean.copy_(k.mean);
      bn->running_var.copy_(k.var);
    }
    bn->train(*rc::gen::arbitrary<bool>());
    TAPEGRAD_RC_GRADCHECK(([bn](const std::vector<Tensor>& in) { return (*bn)(in[0]); }), (std::vector<Tensor>{k.x}));
  });
}

TEST_CASE("the fused kernels match composed ops on the serial, parallel and channel-block paths") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Shape& shape : {Shape{16, 4, 24, 24}, Shape{300, 130}, Shape{5, 3, 7}, Shape{7, 70}}) {
      CAPTURE(dtype_name(dtype), shape_string(shape));
      Generator generator(7);
      const TensorOptions options = TensorOptions{}.with_dtype(dtype);
      const Tensor x = (randn(shape, generator, options) * 3.0 + 5.0).detach().requires_grad_(true);
      const Tensor w = uniform({shape[1]}, 0.5, 1.5, generator, options).requires_grad_(true);
      const Tensor b = randn({shape[1]}, generator, options).requires_grad_(true);
      const Tensor g = randn(shape, generator, options);
      std::vector<std::int64_t> dims{0};
      for (std::int64_t d = 2; d < static_cast<std::int64_t>(shape.size()); ++d) dims.push_back(d);
      Shape cs(shape.size(), 1);
      cs[1] = shape[1];
      const Tensor m = mean(x, dims, true);
      const Tensor var = mean((x - m) * (x - m), dims, true);
      const Tensor expected = (x - m) / exp(log(var + 1e-5) * 0.5) * w.reshape(cs) + b.reshape(cs);

      const auto fused = batch_norm_train(x, w, b, 1e-5);
      const double tolerance = dtype == DType::Float64 ? 1e-10 : 2e-4;
      CHECK(allclose(fused.output, expected, tolerance, tolerance));
      CHECK(allclose(fused.var, var.reshape({shape[1]}), tolerance, tolerance));
      const auto want = autograd::grad({expected}, {x, w, b}, {g});
      const auto got = autograd::grad({fused.output}, {x, w, b}, {g});
      for (std::size_t i = 0; i < 3; ++i) CHECK(allclose(got[i], want[i], tolerance, tolerance * 10));
    }
  }
}

TEST_CASE("a BatchNorm forward is one record on the tape; the running update is none") {
  nn::BatchNorm2d bn(3);
  const Tensor x = randn({4, 3, 2, 2}).requires_grad_(true);
  const std::size_t before = tape_size();
  const Tensor y = bn(x);
  CHECK(tape_size() == before + 1);
  CHECK(y.grad_fn_name() == "batch_norm_train");
  bn.eval();
  const Tensor z = bn(x);
  CHECK(tape_size() == before + 2);
  CHECK(z.grad_fn_name() == "batch_norm_eval");
  for (const Tensor& buffer : bn.buffers()) CHECK_FALSE(buffer.requires_grad());
}

// ---------------------------------------------------------------- buffers

namespace {

// A random stack: [N, F] through Linear-BatchNorm1d-ReLU blocks, or [N, C, H, W] through BatchNorm2d-ReLU.
struct RandomModel {
  std::shared_ptr<nn::Sequential> model;
  Shape input_shape;
};

RandomModel gen_model() {
  RandomModel r;
  r.model = std::make_shared<nn::Sequential>();
  const bool conv_like = *rc::gen::arbitrary<bool>();
  const int blocks = *rc::gen::inRange(1, 4);
  std::int64_t features = *rc::gen::inRange<std::int64_t>(1, 5);
  const std::int64_t batch = *rc::gen::inRange<std::int64_t>(2, 6);
  if (conv_like) {
    r.input_shape = {batch, features, *rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 4)};
    for (int i = 0; i < blocks; ++i) {
      r.model->push_back(std::make_shared<nn::BatchNorm2d>(*gen_options(features)));
      r.model->push_back(std::make_shared<nn::ReLU>());
    }
  } else {
    r.input_shape = {batch, features};
    for (int i = 0; i < blocks; ++i) {
      const std::int64_t next = *rc::gen::inRange<std::int64_t>(1, 5);
      r.model->push_back(std::make_shared<nn::Linear>(features, next));
      r.model->push_back(std::make_shared<nn::BatchNorm1d>(*gen_options(next)));
      r.model->push_back(std::make_shared<nn::ReLU>());
      features = next;
    }
  }
  r.model->to(DType::Float64);
  return r;
}

Tensor gen_input(const Shape& shape) {
  return *gen::tensor_of_shape(shape, -3.0, 3.0);
}

// Runs a few training steps so the buffers hold something other than their initial values.
void warm_up(nn::Module& model, const Shape& shape) {
  NoGradGuard no_grad;
  model.train();
  for (int i = 0; i < 2; ++i) model(gen_input(shape));
}

// Runs the Sequential's children one by one in training mode, checking each BatchNorm's update.
void check_training_forward(nn::Sequential& model, const Tensor& input) {
  Tensor h = input;
  for (const auto& child : model) {
    auto bn = std::dynamic_pointer_cast<nn::BatchNormBase>(child);
    if (!bn || !bn->options().track_running_stats) {
      h = (*child)(h);
      continue;
    }
    const Tensor mean_before = bn->running_mean.detach().clone(), var_before = bn->running_var.detach().clone();
    const double tracked = bn->num_batches_tracked.item();
    const Tensor bn_input = h.detach().clone();
    h = (*child)(h);
    check_ema_update(*bn, bn_input, mean_before, var_before, tracked);
  }
}

}  // namespace

TEST_CASE("random BatchNorm stacks keep every buffer rule of the testing kit") {
  // The kit's rules (testing.h) cover eval forwards, backward, NoGradGuard, state() and loading; the model
  // and its input shape are drawn together, the model first.
  auto input_shape = std::make_shared<Shape>();
  const tapegrad::testing::ModuleFactory make = [input_shape] {
    RandomModel r = gen_model();
    *input_shape = r.input_shape;
    return std::shared_ptr<nn::Module>(r.model);
  };
  tapegrad::testing::check_buffer_invariance(make, rc::gen::exec([input_shape] { return gen_input(*input_shape); }),
                                             {.statistics = {"running_mean", "running_var", "num_batches_tracked"}});
}

TEST_CASE("running statistics follow the EMA rule, with and without grad mode") {
  rc::prop("a training forward moves running stats by the EMA rule with unbiased variance", [] {
    RandomModel r = gen_model();
    warm_up(*r.model, r.input_shape);
    const Tensor x = gen_input(r.input_shape).requires_grad_(true);
    auto twin = std::dynamic_pointer_cast<nn::Sequential>(r.model->clone());
    check_training_forward(*r.model, x);
    (*twin)(x);  // the Sequential's own forward must do exactly the same
    const auto manual = r.model->named_buffers(), own = twin->named_buffers();
    RC_ASSERT(manual.size() == own.size());
    for (std::size_t i = 0; i < own.size(); ++i) RC_ASSERT(identical(own[i].second, manual[i].second));
  });
  rc::prop("a training forward under NoGradGuard still updates the running stats", [] {
    RandomModel r = gen_model();
    warm_up(*r.model, r.input_shape);
    NoGradGuard no_grad;
    check_training_forward(*r.model, gen_input(r.input_shape));
  });
  rc::prop("after to(float64) the statistics are float64 and the counter and frozen flag 0-dim int64", [] {
    RandomModel r = gen_model();
    for (const auto& [name, b] : r.model->named_buffers()) {
      if (name.ends_with("num_batches_tracked") || name.ends_with("frozen"))
        RC_ASSERT(b.dtype() == DType::Int64 && b.dim() == 0);
      else
        RC_ASSERT(b.dtype() == DType::Float64);
    }
  });
}

TEST_CASE("requires_grad = false on weight and bias does not stop the running statistics; eval does") {
  nn::BatchNorm1d bn(3);
  bn.to(DType::Float64);
  bn.weight.requires_grad_(false);
  bn.bias.requires_grad_(false);
  const Tensor x = randn({5, 3}, default_generator(), f64) * 2.0 + 1.0;
  bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK_FALSE(identical(bn.running_mean, zeros({3}, f64)));
  bn.eval();
  const auto before = snapshot(bn);
  bn(x);
  CHECK(buffers_identical(bn, before));
}

TEST_CASE("momentum unset is the cumulative average of the batch statistics") {
  nn::BatchNormOptions o{2};
  o.momentum = std::nullopt;
  nn::BatchNorm1d bn(o);
  bn.to(DType::Float64);
  std::vector<Tensor> means;
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({6, 2}, default_generator(), f64) + static_cast<double>(i);
    means.push_back(mean(x, {0}));
    bn(x);
  }
  CHECK(allclose(bn.running_mean, (means[0] + means[1] + means[2] + means[3]) / 4.0, 1e-12, 1e-14));
  CHECK(bn.num_batches_tracked.item() == 4);
}

TEST_CASE("track_running_stats = false has no statistics buffers and uses batch statistics in eval") {
  nn::BatchNormOptions o{3};
  o.track_running_stats = false;
  nn::BatchNorm2d bn(o);
  const nn::NamedTensors buffers = bn.named_buffers();
  REQUIRE(buffers.size() == 1);  // only the frozen flag
  CHECK(buffers[0].first == "frozen");
  const Tensor x = randn({2, 3, 2, 2});
  const Tensor train_out = bn(x);
  bn.eval();
  CHECK(identical(bn(x), train_out));
}

// ---------------------------------------------------------------- module plumbing

TEST_CASE("BatchNorm registers PyTorch's parameters and buffers, then its frozen flag") {
  nn::BatchNorm2d bn(4);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state()) names.push_back(name);
  CHECK(names ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked", "frozen"});
  CHECK(bn.buffer("frozen").dtype() == DType::Int64);
  CHECK(bn.buffer("frozen").item() == 0);
  CHECK(bn.weight.to_vector() == std::vector<double>(4, 1.0));
  CHECK(bn.bias.to_vector() == std::vector<double>(4, 0.0));
  CHECK(bn.running_mean.to_vector() == std::vector<double>(4, 0.0));
  CHECK(bn.running_var.to_vector() == std::vector<double>(4, 1.0));
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  nn::BatchNormOptions bare{4};
  bare.affine = false;
  CHECK(nn::BatchNorm1d(bare).parameters().empty());
}

TEST_CASE("BatchNorm prints its options like PyTorch") {
  CHECK(nn::BatchNorm2d(64).extra_repr() == "64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
  nn::BatchNormOptions o{8};
  o.momentum = std::nullopt;
  o.affine = false;
  CHECK(nn::BatchNorm1d(o).extra_repr() == "8, eps=1e-05, momentum=None, affine=false, track_running_stats=true");
}

TEST_CASE("clone gives an independent BatchNorm with the same state and mode") {
  nn::BatchNorm2d bn(2);
  bn(randn({3, 2, 2, 2}) + 4.0);
  bn.eval();
  auto copy = std::dynamic_pointer_cast<nn::BatchNorm2d>(bn.clone());
  REQUIRE(copy);
  CHECK_FALSE(copy->is_training());
  CHECK(identical(copy->running_mean, bn.running_mean));
  CHECK(copy->num_batches_tracked.item() == 1);
  copy->train();
  (*copy)(randn({3, 2, 2, 2}));
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(copy->num_batches_tracked.item() == 2);
}

TEST_CASE("a version-1 state without num_batches_tracked (or the frozen flag) loads with the counter at 0") {
  nn::BatchNorm1d source(3), target(3);
  source(randn({4, 3}));
  nn::NamedTensors old_state;
  for (const auto& [name, t] : source.state())
    if (name != "num_batches_tracked" && name != "frozen") old_state.emplace_back(name, t);
  target(randn({4, 3}));
  CHECK(target.state_versions().at("") == 3);
  CHECK_THROWS_WITH(target.load_state(old_state), Catch::Contains("missing keys num_batches_tracked, frozen"));
  target.freeze();
  target.load_state(old_state, true, {{"", 1}});
  CHECK(target.num_batches_tracked.item() == 0);
  CHECK_FALSE(target.frozen());  // version 1 had no freezing: the layer was not frozen
  CHECK(identical(target.running_var, source.running_var));
}

TEST_CASE("bad inputs to BatchNorm give PyTorch's and tapegrad's messages") {
  nn::BatchNorm1d bn1(4);
  CHECK_THROWS_WITH(bn1(randn({1, 4})),
                    "Expected more than 1 value per channel when training, got input size [1, 4]");
  CHECK_THROWS_WITH(bn1(randn({2, 4, 3, 3})),
                    "BatchNorm1d: expected 2-D input [N, C] or 3-D input [N, C, L], got [2, 4, 3, 3]");
  bn1.eval();
  CHECK_NOTHROW(bn1(randn({1, 4})));  // eval with running statistics needs no batch statistics
  nn::BatchNorm2d bn2(64);
  CHECK_THROWS_WITH(bn2(randn({8, 3})), "BatchNorm2d: expected 4-D input [N, C, H, W], got [8, 3]");
  CHECK_THROWS_WITH(bn2(randn({8, 32, 14, 14})), "BatchNorm2d: expected 64 channels, got input [8, 32, 14, 14]");
  CHECK_THROWS_WITH(bn2(randn({1, 64, 1, 1})),
                    "Expected more than 1 value per channel when training, got input size [1, 64, 1, 1]");
  CHECK_THROWS_WITH(bn2(randn({2, 64, 2, 2}, default_generator(), f64)),
                    Catch::Contains("is float64 but the layer is float32"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(0), "BatchNorm2d: num_features must be positive, got 0");
  CHECK_THROWS_WITH(batch_norm_train(randn({4, 3}), ones({2}), Tensor(), 1e-5),
                    "batch_norm_train: weight must have shape [3] for input [4, 3], got [2]");
}

TEST_CASE("keras_momentum_to_tapegrad converts the old-value weight to the new-batch weight") {
  CHECK(nn::keras_momentum_to_tapegrad(0.99) == Approx(0.01));
  CHECK(nn::keras_momentum_to_tapegrad(0.9) == Approx(0.1));
  CHECK_THROWS_WITH(nn::keras_momentum_to_tapegrad(1.5),
                    "keras_momentum_to_tapegrad: expected a momentum in [0, 1], got 1.5");
}
