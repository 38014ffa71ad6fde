// BatchNorm: PyTorch's numbers, and gradients to second order, of the fused ops and the layers.
// (The buffers' rules and the module plumbing are test_batch_norm_buffers.cpp.)
#include <cmath>
#include <map>

#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>
#include "support/properties.h"
#include "support/reference_file.h"
#include "support/spread_input.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;
using tapegrad::testing::spread_input;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

std::shared_ptr<nn::BatchNormBase> make_batch_norm(int kind, const nn::BatchNormOptions& options) {
  if (kind == 1) return std::make_shared<nn::BatchNorm1d>(options);
  return std::make_shared<nn::BatchNorm2d>(options);
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
  // The reference file written by tests/reference/make_batchnorm_reference.py.
  const auto ref = tapegrad::testing::load_reference_file("batchnorm_reference.txt");
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

