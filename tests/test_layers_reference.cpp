// GroupNorm, InstanceNorm1d/2d, BatchNorm3d, Embedding and max_pool2d_with_indices against PyTorch 1.13's numbers
// in tests/data/layers_reference.txt (written by tests/reference/make_layers_reference.py): outputs, gradients of
// input and parameters, running statistics step by step, and max-pool indices.
#include <set>

#include "support/properties.h"
#include "support/reference_file.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;
using tapegrad::testing::reference_entry;

namespace {

const TensorOptions f64 = TensorOptions{}.with_dtype(DType::Float64);

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref = tapegrad::testing::load_reference_file("layers_reference.txt");
  return ref;
}

const Tensor& at(const std::string& key) { return reference_entry(reference(), key); }
double number(const std::string& key) { return at(key).item(); }

// The case names of the file that have a `case/field` entry.
std::set<std::string> cases_with(const std::string& field) {
  std::set<std::string> out;
  const std::string suffix = "/" + field;
  for (const auto& [key, value] : reference())
    if (key.size() > suffix.size() && key.ends_with(suffix) && key.find('/') == key.size() - suffix.size())
      out.insert(key.substr(0, key.size() - suffix.size()));
  return out;
}

Tensor int64_of(const Tensor& doubles) {
  std::vector<std::int64_t> values;
  for (double v : doubles.to_vector()) values.push_back(static_cast<std::int64_t>(v));
  return from_vector(values, doubles.shape());
}

void set_affine(nn::Module& m, const std::string& name) {
  NoGradGuard no_grad;
  Tensor weight = m.parameter("weight"), bias = m.parameter("bias");
  weight.copy_(at(name + "/weight_init"));
  bias.copy_(at(name + "/bias_init"));
}

// One forward and backward of `m` on the case's input, compared with PyTorch's output and gradients.
void check_step(nn::Module& m, const std::string& key, bool affine, double rtol = 1e-10, double atol = 1e-12) {
  INFO(key);
  for (Tensor p : m.parameters()) p.set_grad(Tensor());
  const Tensor x = at(key + "/input").detach().clone().requires_grad_(true);
  const Tensor y = m(x);
  CHECK(allclose(y, at(key + "/output"), rtol, atol));
  y.backward(at(key + "/grad_output"));
  CHECK(allclose(x.grad(), at(key + "/grad_input"), rtol, atol));
  if (affine) {
    CHECK(allclose(m.parameter("weight").grad(), at(key + "/grad_weight"), rtol, atol));
    CHECK(allclose(m.parameter("bias").grad(), at(key + "/grad_bias"), rtol, atol));
  }
}

void check_statistics(nn::Module& m, const std::string& key) {
  INFO(key);
  CHECK(allclose(m.buffer("running_mean"), at(key + "/running_mean"), 1e-10, 1e-12));
  CHECK(allclose(m.buffer("running_var"), at(key + "/running_var"), 1e-10, 1e-12));
  CHECK(m.buffer("num_batches_tracked").item() == number(key + "/num_batches_tracked"));
  CHECK(m.buffer("num_batches_tracked").dtype() == DType::Int64);
}

// Runs the case's steps (training or eval each), checking outputs, gradients and running statistics.
void check_steps(nn::Module& m, const std::string& name, bool affine, bool track) {
  const int steps = static_cast<int>(number(name + "/steps"));
  REQUIRE(steps > 0);
  for (int step = 0; step < steps; ++step) {
    const std::string key = fmt::format("{}/s{}", name, step);
    m.train(number(key + "/train") != 0.0);
    check_step(m, key, affine);
    if (track) check_statistics(m, key);
  }
}

}  // namespace

TEST_CASE("GroupNorm matches PyTorch: output and gradients of input, weight and bias") {
  const auto names = cases_with("num_groups");
  REQUIRE(names.size() >= 6);
  for (const std::string& name : names) {
    const bool affine = number(name + "/affine") != 0.0;
    nn::GroupNorm gn(nn::GroupNormOptions{static_cast<std::int64_t>(number(name + "/num_groups")),
                                          static_cast<std::int64_t>(number(name + "/num_channels"))}
                         .with_eps(number(name + "/eps"))
                         .with_affine(affine)
                         .with_dtype(DType::Float64));
    if (affine) set_affine(gn, name);
    check_step(gn, name, affine);
    gn.eval();  // per-sample statistics: eval is the same computation
    check_step(gn, name, affine);
  }
}

TEST_CASE("InstanceNorm1d/2d match PyTorch step by step: outputs, gradients and running statistics") {
  const auto names = cases_with("spatial_dims");
  REQUIRE(names.size() >= 7);
  for (const std::string& name : names) {
    const bool affine = number(name + "/affine") != 0.0, track = number(name + "/track_running_stats") != 0.0;
    const auto options = nn::InstanceNormOptions{static_cast<std::int64_t>(number(name + "/num_features"))}
                             .with_eps(number(name + "/eps"))
                             .with_momentum(number(name + "/momentum"))
                             .with_affine(affine)
                             .with_track_running_stats(track)
                             .with_dtype(DType::Float64);
    std::shared_ptr<nn::InstanceNormBase> norm;
    if (number(name + "/spatial_dims") == 1)
      norm = std::make_shared<nn::InstanceNorm1d>(options);
    else
      norm = std::make_shared<nn::InstanceNorm2d>(options);
    if (affine) set_affine(*norm, name);
    check_steps(*norm, name, affine, track);
  }
}

TEST_CASE("BatchNorm3d (built float64 through its dtype option) matches PyTorch step by step") {
  const auto names = cases_with("num_features");
  std::size_t checked = 0;
  for (const std::string& name : names) {
    if (!name.starts_with("bn3d")) continue;
    const bool affine = number(name + "/affine") != 0.0, track = number(name + "/track_running_stats") != 0.0;
    const double momentum = number(name + "/momentum");
    nn::BatchNorm3d bn(nn::BatchNormOptions{static_cast<std::int64_t>(number(name + "/num_features"))}
                           .with_eps(number(name + "/eps"))
                           .with_momentum(momentum < 0 ? std::nullopt : std::optional<double>(momentum))
                           .with_affine(affine)
                           .with_track_running_stats(track)
                           .with_dtype(DType::Float64));
    if (affine) set_affine(bn, name);
    check_steps(bn, name, affine, track);
    ++checked;
  }
  CHECK(checked == 3);
}

TEST_CASE("Embedding matches PyTorch: rows picked, and the scatter-added weight gradient with padding_idx") {
  const auto names = cases_with("embedding_dim");
  REQUIRE(names.size() >= 4);
  for (const std::string& name : names) {
    INFO(name);
    const double padding = number(name + "/padding_idx");
    const std::optional<std::int64_t> padding_idx =
        padding == -100 ? std::nullopt : std::optional<std::int64_t>(static_cast<std::int64_t>(padding));
    auto emb = nn::Embedding::from_pretrained(at(name + "/weight").clone(), /*freeze=*/false, padding_idx);
    CHECK(emb->options().num_embeddings == static_cast<std::int64_t>(number(name + "/num_embeddings")));
    const Tensor y = (*emb)(int64_of(at(name + "/indices")));
    CHECK(identical(y, at(name + "/output")));
    y.backward(at(name + "/grad_output"));
    CHECK(allclose(emb->weight.grad(), at(name + "/grad_weight"), 1e-12, 1e-14));
    // A fresh layer with the same padding_idx starts with that row at zero, as PyTorch's.
    nn::Embedding fresh(nn::EmbeddingOptions{emb->options().num_embeddings, emb->options().embedding_dim,
                                             padding_idx});
    if (padding_idx) {
      const std::int64_t row = *fresh.options().padding_idx;
      for (std::int64_t j = 0; j < fresh.options().embedding_dim; ++j) CHECK(fresh.weight.at({row, j}) == 0.0);
    }
  }
}

TEST_CASE("max_pool2d_with_indices and MaxPool2d match PyTorch: output, flattened-per-plane indices, gradient") {
  const auto names = cases_with("ceil_mode");
  REQUIRE(names.size() >= 5);
  for (const std::string& name : names) {
    INFO(name);
    auto pair = [&](const std::string& field) {
      const Tensor& t = at(name + "/" + field);
      return IntPair(static_cast<std::int64_t>(t.at({0})), static_cast<std::int64_t>(t.at({1})));
    };
    nn::MaxPool2d pool(nn::MaxPool2dOptions{pair("kernel")}
                           .with_stride(pair("stride"))
                           .with_padding(pair("padding"))
                           .with_dilation(pair("dilation"))
                           .with_ceil_mode(number(name + "/ceil_mode") != 0.0)
                           .with_return_indices(true));
    const Tensor x = at(name + "/input").detach().clone().requires_grad_(true);
    const auto [y, indices] = pool.forward_with_indices(x);
    CHECK(identical(y, at(name + "/output")));
    CHECK(indices.dtype() == DType::Int64);
    CHECK(identical(indices, int64_of(at(name + "/indices"))));
    y.backward(at(name + "/grad_output"));
    CHECK(allclose(x.grad(), at(name + "/grad_input"), 1e-12, 1e-14));
    // forward() with return_indices keeps the same indices for last_indices()
    CHECK(identical(pool(x.detach()), at(name + "/output")));
    CHECK(identical(pool.last_indices(), indices));
  }
}
