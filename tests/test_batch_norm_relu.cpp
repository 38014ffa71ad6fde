// BatchNorm followed by ReLU as one op (what Sequential runs for a BatchNorm layer directly followed by a ReLU
// layer): gradients to second order in float64, the same bits as the two ops forward and backward on every
// kernel path, and the layer-level fusion: the same outputs, gradients and running statistics as the two layers
// called one after the other, one tape record fewer, and no fusion for a subclass with its own forward().
#include <cmath>
#include <vector>

#include <tapegrad/framework/ops/detail/batch_norm_relu.h>
#include "support/properties.h"
#include "support/spread_input.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::spread_input;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

struct Case {
  Tensor x, weight, bias, mean, var;
  double eps;
};

// A random BatchNorm case, [N, C] plus 0 to 2 spatial dims of size 1..3.
Case gen_case(int max_spatial) {
  const int spatial = *rc::gen::inRange(0, max_spatial + 1);
  Shape s = *rc::gen::container<Shape>(static_cast<std::size_t>(2 + spatial), rc::gen::inRange<std::int64_t>(1, 4));
  if (shape_numel(s) / s[1] < 2) s[0] = 2;
  Case k;
  k.x = spread_input(s);
  const Shape channels{s[1]};
  k.weight = *gen::tensor_of_shape(channels, 0.5, 2.0);
  k.bias = *gen::tensor_of_shape(channels);
  k.mean = *gen::tensor_of_shape(channels);
  k.var = *gen::tensor_of_shape(channels, 0.2, 2.0);
  k.eps = *rc::gen::element(1e-5, 1e-3);
  return k;
}

// Finite differences across ReLU's kink are meaningless: skip a case whose BatchNorm output comes near 0.
void require_away_from_kink(const Tensor& y) {
  for (double v : y.to_vector()) RC_PRE(std::abs(v) > 1e-3);
}

TensorFunction train_relu(const Case& k) {
  return [k](const std::vector<Tensor>& in) { return detail::batch_norm_train_relu(in[0], in[1], in[2], k.eps).output; };
}

TensorFunction eval_relu(const Case& k) {
  return [k](const std::vector<Tensor>& in) {
    return detail::batch_norm_eval_relu(in[0], k.mean, k.var, in[1], in[2], k.eps);
  };
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (x[i] != y[i] || std::signbit(x[i]) != std::signbit(y[i])) return false;
  }
  return true;
}

// Values for the bit comparisons: random, with whole channels constant (var 0, so the output is the bias
// exactly, which is 0 for some channels: ReLU's kink itself), and now and then a NaN.
Tensor awkward_input(const Shape& s, DType dtype, Generator& gen, bool with_nan) {
  std::vector<double> v = randn(s, gen, f64).to_vector();
  const std::int64_t per_channel_run = shape_numel(s) / (s[0] * s[1]);
  for (std::int64_t n = 0; n < s[0]; ++n)
    for (std::int64_t c = 0; c < s[1]; c += 3)
      for (std::int64_t i = 0; i < per_channel_run; ++i) v[static_cast<std::size_t>((n * s[1] + c) * per_channel_run + i)] = 0.75;
  if (with_nan) v[v.size() / 2 + 1] = std::nan("");
  return from_vector(v, s, TensorOptions{}.with_dtype(dtype));
}

}  // namespace

TEST_CASE("BatchNorm+ReLU gradients are right in training and eval mode (float64)") {
  rc::prop("batch_norm_train_relu wrt input, weight, bias", [] {
    const Case k = gen_case(2);
    require_away_from_kink(batch_norm_train(k.x, k.weight, k.bias, k.eps).output);
    TAPEGRAD_RC_GRADCHECK(train_relu(k), (std::vector<Tensor>{k.x, k.weight, k.bias}));
  });
  rc::prop("batch_norm_eval_relu wrt input, weight, bias", [] {
    const Case k = gen_case(2);
    require_away_from_kink(batch_norm_eval(k.x, k.mean, k.var, k.weight, k.bias, k.eps));
    TAPEGRAD_RC_GRADCHECK(eval_relu(k), (std::vector<Tensor>{k.x, k.weight, k.bias}));
  });
}

TEST_CASE("BatchNorm+ReLU is twice differentiable in training and eval mode (float64)") {
  rc::prop("batch_norm_train_relu second derivatives", [] {
    const Case k = gen_case(1);
    require_away_from_kink(batch_norm_train(k.x, k.weight, k.bias, k.eps).output);
    TAPEGRAD_RC_GRADGRADCHECK(train_relu(k), (std::vector<Tensor>{k.x, k.weight, k.bias}));
  });
  rc::prop("batch_norm_eval_relu second derivatives", [] {
    const Case k = gen_case(1);
    require_away_from_kink(batch_norm_eval(k.x, k.mean, k.var, k.weight, k.bias, k.eps));
    TAPEGRAD_RC_GRADGRADCHECK(eval_relu(k), (std::vector<Tensor>{k.x, k.weight, k.bias}));
  });
}

TEST_CASE("BatchNorm+ReLU gives the bits of the two ops, forward and backward, on every kernel path") {
  Generator gen(5);
  // [N, C] rows (channel blocks), one sample or one channel (per-channel runs), [N, C, ...] up to 16 MB
  // (memory-order sweeps, threaded when big).
  const std::vector<Shape> shapes{{64, 40}, {3, 5, 4, 4}, {8, 16, 32, 32}, {2, 600}, {16, 8, 3}, {1, 6, 5, 5},
                                  {40, 1}};
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const Shape& s : shapes)
      for (const bool with_nan : {false, true})
        for (const bool training : {true, false}) {
          CAPTURE(dtype_name(dtype), shape_string(s), with_nan, training);
          const TensorOptions options = TensorOptions{}.with_dtype(dtype);
          const Tensor input = awkward_input(s, dtype, gen, with_nan);
          std::vector<double> bias_values = randn({s[1]}, gen, f64).to_vector();
          for (std::size_t c = 0; c < bias_values.size(); c += 2) bias_values[c] = 0.0;
          const Tensor weight0 = rand({s[1]}, gen, options) + 0.5;
          const Tensor bias0 = from_vector(bias_values, {s[1]}, options);
          const Tensor mean = randn({s[1]}, gen, options), var = rand({s[1]}, gen, options) + 0.1;
          const Tensor upstream = randn(s, gen, options);

          auto leaves = [&] {
            return std::vector<Tensor>{input.clone().requires_grad_(true), weight0.clone().requires_grad_(true),
                                       bias0.clone().requires_grad_(true)};
          };
          std::vector<Tensor> fused = leaves(), split = leaves();
          const Tensor y_fused = training ? detail::batch_norm_train_relu(fused[0], fused[1], fused[2], 1e-5).output
                                          : detail::batch_norm_eval_relu(fused[0], mean, var, fused[1], fused[2], 1e-5);
          const Tensor y_split = relu(training ? batch_norm_train(split[0], split[1], split[2], 1e-5).output
                                               : batch_norm_eval(split[0], mean, var, split[1], split[2], 1e-5));
          CHECK(same_bits(y_fused, y_split));
          y_fused.backward(upstream);
          y_split.backward(upstream);
          for (std::size_t i = 0; i < 3; ++i) CHECK(same_bits(fused[i].grad(), split[i].grad()));
        }
}

TEST_CASE("a training forward of BatchNorm+ReLU returns the statistics of the BatchNorm alone") {
  Generator gen(6);
  const Tensor x = randn({6, 4, 5}, gen);
  const BatchNormTrainResult fused = detail::batch_norm_train_relu(x, Tensor(), Tensor(), 1e-5);
  const BatchNormTrainResult split = batch_norm_train(x, Tensor(), Tensor(), 1e-5);
  CHECK(same_bits(fused.mean, split.mean));
  CHECK(same_bits(fused.var, split.var));
  CHECK(same_bits(fused.unbiased_var, split.unbiased_var));
}

TEST_CASE("Sequential runs BatchNorm then ReLU as one op, with the two layers' results") {
  Generator gen(7);
  for (const bool training : {true, false})
    for (const int kind : {1, 2, 3}) {
      CAPTURE(training, kind);
      auto make_batch_norm = [&]() -> std::shared_ptr<nn::BatchNormBase> {
        if (kind == 1) return std::make_shared<nn::BatchNorm1d>(6);
        if (kind == 2) return std::make_shared<nn::BatchNorm2d>(6);
        return std::make_shared<nn::BatchNorm3d>(6);
      };
      const Shape s = kind == 1 ? Shape{10, 6} : kind == 2 ? Shape{4, 6, 5, 5} : Shape{2, 6, 3, 3, 3};
      auto batch_norm = make_batch_norm();
      {
        NoGradGuard no_grad;
        batch_norm->weight.copy_(rand({6}, gen) + 0.5);
        batch_norm->bias.copy_(randn({6}, gen));
        batch_norm->running_mean.copy_(randn({6}, gen));
        batch_norm->running_var.copy_(rand({6}, gen) + 0.5);
      }
      auto fused_model = nn::Sequential({batch_norm->clone(), std::make_shared<nn::ReLU>()});
      auto split_batch_norm = std::static_pointer_cast<nn::BatchNormBase>(batch_norm->clone());
      nn::ReLU split_relu;
      fused_model.train(training);
      split_batch_norm->train(training);

      for (int step = 0; step < 3; ++step) {
        const Tensor x = randn(s, gen);
        const Tensor x_fused = x.clone().requires_grad_(true), x_split = x.clone().requires_grad_(true);
        const std::size_t before = tape_size();
        const Tensor y_fused = fused_model.forward(x_fused);
        const std::size_t fused_records = tape_size() - before;
        // Note: BatchNorm3d reshapes to [N, C, D*H*W] and back around the op, two records more on either side.
        if (kind != 3) CHECK(y_fused.grad_fn_name() == (training ? "batch_norm_train_relu" : "batch_norm_eval_relu"));
        const Tensor y_split = split_relu.forward(split_batch_norm->forward(x_split));
        CHECK(tape_size() - before - fused_records == fused_records + 1);
        CHECK(same_bits(y_fused, y_split));
        const Tensor upstream = randn(s, gen);
        y_fused.backward(upstream);
        y_split.backward(upstream);
        CHECK(same_bits(x_fused.grad(), x_split.grad()));
      }
      const nn::NamedTensors fused_state = fused_model.state();
      const nn::NamedTensors split_state = split_batch_norm->state();
      for (const auto& [key, value] : split_state) {
        bool found = false;
        for (const auto& [fused_key, fused_value] : fused_state)
          if (fused_key == "0." + key) {
            found = true;
            CHECK(same_bits(fused_value, value));
          }
        CHECK(found);
      }
      for (const auto& [name, parameter] : split_batch_norm->named_parameters())
        for (const auto& [fused_name, fused_parameter] : fused_model.named_parameters())
          if (fused_name == "0." + name) CHECK(same_bits(fused_parameter.grad(), parameter.grad()));
    }
}

namespace {

// A BatchNorm2d whose forward() does something else: Sequential must call it, not fuse around it.
class ShiftedBatchNorm : public nn::BatchNorm2d {
 public:
  using nn::BatchNorm2d::BatchNorm2d;
  Tensor forward(const Tensor& input) override { return nn::BatchNorm2d::forward(input) - 1.0; }
};

}  // namespace

TEST_CASE("Sequential does not fuse a BatchNorm subclass, a ReLU that is not next, or a lone BatchNorm") {
  Generator gen(8);
  const Tensor x = randn({4, 3, 2, 2}, gen);
  auto shifted = std::make_shared<ShiftedBatchNorm>(3);
  nn::Sequential model({shifted, std::make_shared<nn::ReLU>()});
  nn::BatchNorm2d plain(3);
  CHECK(same_bits(model.forward(x), relu(plain.forward(x) - 1.0)));

  nn::Sequential apart({std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::Dropout>(0.0),
                        std::make_shared<nn::ReLU>()});
  const Tensor leaf = x.clone().requires_grad_(true);
  CHECK(apart.forward(leaf).grad_fn_name() == "relu");
  nn::Sequential last({std::make_shared<nn::ReLU>(), std::make_shared<nn::BatchNorm2d>(3)});
  CHECK(last.forward(leaf).grad_fn_name() == "batch_norm_train");
}

TEST_CASE("the fused op's backward does not read its output: modifying it in place changes no gradient") {
  // Note: the backward recomputes ReLU's input from the saved input, so the output is not saved (unlike the
  // pair, whose ReLU saved the BatchNorm output). A dirty output must not leak into the mask.
  Generator gen(9);
  nn::Sequential model({std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::ReLU>()});
  nn::BatchNorm2d plain(3);
  const Tensor x = randn({4, 3, 2, 2}, gen).requires_grad_(true);
  const Tensor x_plain = x.detach().clone().requires_grad_(true);
  Tensor y = model.forward(x);
  {
    NoGradGuard no_grad;
    y.mul_(-1.0);
  }
  CHECK(y.grad_fn_name() == "batch_norm_train_relu");
  sum(y * x.detach()).backward();
  sum(relu(plain.forward(x_plain)) * x.detach()).backward();
  CHECK(same_bits(x.grad(), x_plain.grad()));
}
