// recompute_batchnorm_statistics: the running statistics become the exact mean and unbiased variance of every
// input each BatchNorm saw, however the data was split into batches.
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using tapegrad::testing::allclose;
using tapegrad::testing::identical;

namespace {

const TensorOptions kDouble = TensorOptions{}.with_dtype(DType::Float64);

/// Per-channel mean and unbiased variance of `values` [N, C, *] over every dim but 1, two-pass in float64.
std::pair<Tensor, Tensor> whole_statistics(const Tensor& values) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < values.dim(); ++d) dims.push_back(d);
  const Tensor m = mean(values, dims, true);
  const Tensor centered = values - m;
  const double n = static_cast<double>(values.numel() / values.size(1));
  return {mean(values, dims), sum(centered * centered, dims) / (n - 1.0)};
}

/// Random batch sizes (each at least 2) adding up to n >= 2.
std::vector<std::int64_t> gen_batch_sizes(std::int64_t n) {
  std::vector<std::int64_t> sizes;
  std::int64_t left = n;
  while (left > 0) {
    std::int64_t size = left <= 3 ? left : *rc::gen::inRange<std::int64_t>(2, left - 1);
    sizes.push_back(size);
    left -= size;
  }
  return sizes;
}

/// A source yielding consecutive slices of `data` along dim 0 with the given sizes.
nn::BatchSource slices(const Tensor& data, std::vector<std::int64_t> sizes) {
  auto position = std::make_shared<std::pair<std::size_t, std::int64_t>>(0, 0);
  return [data, sizes, position]() -> Tensor {
    if (position->first == sizes.size()) return Tensor();
    const std::int64_t start = position->second, size = sizes[position->first++];
    position->second += size;
    return slice(data, 0, start, start + size);
  };
}

std::vector<Tensor> buffers_copy(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : module.named_buffers()) out.push_back(t.clone());
  return out;
}

}  // namespace

TEST_CASE("recomputed statistics are the whole dataset's, for BatchNorms first and deeper in a model") {
  rc::prop("random batch sizes, float64, 1e-10", [](bool train_mode) {
    Generator g(*rc::gen::arbitrary<std::uint32_t>());
    const auto n = *rc::gen::inRange<std::int64_t>(4, 40);
    const auto in = *rc::gen::inRange<std::int64_t>(1, 4), width = *rc::gen::inRange<std::int64_t>(1, 5);
    // Linear -> BatchNorm1d -> ReLU -> Linear -> BatchNorm1d: the first one's inputs are Linear(x) whatever the
    // batching; the deeper one's come through the first one's batch normalization, as in training.
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(nn::LinearOptions{in, width}.with_dtype(DType::Float64).with_generator(g)),
        std::make_shared<nn::BatchNorm1d>(width), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(nn::LinearOptions{width, 3}.with_dtype(DType::Float64).with_generator(g)),
        std::make_shared<nn::BatchNorm1d>(3)});
    model->to(DType::Float64);
    model->train(train_mode);
    const Tensor data = randn({n, in}, g, kDouble) * 3.0 + 10.0;  // far from 0 and 1: a stale value shows
    const std::vector<std::int64_t> sizes = gen_batch_sizes(n);
    const std::vector<Tensor> weights_before = [&] {
      std::vector<Tensor> out;
      for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
      return out;
    }();

    // What each BatchNorm sees, batch by batch, computed here independently of the function under test.
    auto first = model->at_as<nn::BatchNorm1d>(1), deeper = model->at_as<nn::BatchNorm1d>(4);
    std::vector<Tensor> first_inputs, deeper_inputs;
    {
      NoGradGuard no_grad;
      std::int64_t start = 0;
      for (std::int64_t size : sizes) {
        const Tensor h = (*model->at(0))(slice(data, 0, start, start + size));
        first_inputs.push_back(h);
        const Tensor normalized = batch_norm_train(h, first->weight, first->bias, 1e-5).output;
        deeper_inputs.push_back((*model->at(3))((*model->at(2))(normalized)));
        start += size;
      }
    }
    const std::int64_t batches = nn::recompute_batchnorm_statistics(*model, slices(data, sizes));
    RC_ASSERT(batches == static_cast<std::int64_t>(sizes.size()));
    RC_ASSERT(model->is_training() == train_mode);
    RC_ASSERT(first->is_training() == train_mode);
    for (auto [bn, inputs] : {std::pair{first, &first_inputs}, std::pair{deeper, &deeper_inputs}}) {
      const auto [expected_mean, expected_var] = whole_statistics(cat(*inputs, 0));
      RC_ASSERT(allclose(bn->running_mean, expected_mean, 1e-10, 1e-10));
      RC_ASSERT(allclose(bn->running_var, expected_var, 1e-10, 1e-10));
      RC_ASSERT(bn->num_batches_tracked.item() == static_cast<double>(sizes.size()));
    }
    const auto params = model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) RC_ASSERT(identical(params[i], weights_before[i]));
  });
}

TEST_CASE("recomputing over a DataLoader of images uses every pixel of every batch, or the first max_batches") {
  Generator g(3);
  const Tensor images = randn({23, 2, 3, 3}, g, kDouble) * 0.5 + 2.0;
  data::TensorDataset dataset(images, zeros({23}, TensorOptions{}.with_dtype(DType::Int64)));
  data::DataLoader loader(dataset, data::DataLoaderOptions{}.with_batch_size(5));  // 5, 5, 5, 5, 3
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{2, 3, 3}.with_padding(1).with_generator(g));
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{conv, std::make_shared<nn::BatchNorm2d>(3)});
  model->to(DType::Float64);
  model->eval();
  auto bn = model->at_as<nn::BatchNorm2d>(1);
  NoGradGuard no_grad;
  CHECK(nn::recompute_batchnorm_statistics(*model, loader) == 5);
  auto [m, v] = whole_statistics((*conv)(images));
  CHECK(allclose(bn->running_mean, m, 1e-10, 1e-10));
  CHECK(allclose(bn->running_var, v, 1e-10, 1e-10));
  CHECK(!model->is_training());

  CHECK(nn::recompute_batchnorm_statistics(*model, loader, 2) == 2);
  std::tie(m, v) = whole_statistics((*conv)(slice(images, 0, 0, 10)));
  CHECK(allclose(bn->running_mean, m, 1e-10, 1e-10));
  CHECK(allclose(bn->running_var, v, 1e-10, 1e-10));
  CHECK(bn->num_batches_tracked.item() == 2);
}

TEST_CASE("recomputation leaves frozen layers alone and changes nothing when it fails") {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::BatchNorm1d>(2), std::make_shared<nn::BatchNorm1d>(2)});
  model->to(DType::Float64);
  auto frozen = model->at_as<nn::BatchNorm1d>(1);
  frozen->freeze();
  const Tensor data = randn({6, 2}, default_generator(), kDouble) + 4.0;
  const std::vector<Tensor> frozen_before = buffers_copy(*frozen);
  nn::recompute_batchnorm_statistics(*model, slices(data, {3, 3}));
  const std::vector<Tensor> frozen_after = buffers_copy(*frozen);
  for (std::size_t i = 0; i < frozen_before.size(); ++i) CHECK(identical(frozen_before[i], frozen_after[i]));
  CHECK(allclose(model->at_as<nn::BatchNorm1d>(0)->running_mean, mean(data, {0}), 1e-12, 1e-12));

  const std::vector<Tensor> before = buffers_copy(*model);
  CHECK_THROWS_WITH(nn::recompute_batchnorm_statistics(*model, slices(data, {})), Catch::Contains("saw 0 values"));
  CHECK_THROWS_WITH(nn::recompute_batchnorm_statistics(*model, slices(data, {1, 5})),
                    Catch::Contains("more than 1 value per channel"));
  CHECK_THROWS_WITH(nn::recompute_batchnorm_statistics(*model, slices(data, {6}), 0), Catch::Contains("max_batches"));
  const std::vector<Tensor> after = buffers_copy(*model);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(identical(before[i], after[i]));
  // The observers are gone after a failure: a plain eval forward uses the running statistics again.
  model->eval();
  NoGradGuard no_grad;
  const Tensor x = randn({3, 2}, default_generator(), kDouble);
  auto bn = model->at_as<nn::BatchNorm1d>(0);
  CHECK(identical((*bn)(x), batch_norm_eval(x, bn->running_mean, bn->running_var, bn->weight, bn->bias, 1e-5)));

  // One layer used twice (registered under two names) is recomputed over both of its inputs.
  auto shared = std::make_shared<nn::BatchNorm1d>(2);
  shared->to(DType::Float64);
  nn::Sequential twice({shared, shared});
  nn::recompute_batchnorm_statistics(twice, slices(data, {3, 3}));  // its inputs: each batch, then its own output
  const Tensor second_input = cat({batch_norm_train(slice(data, 0, 0, 3), shared->weight, shared->bias, 1e-5).output,
                                   batch_norm_train(slice(data, 0, 3, 6), shared->weight, shared->bias, 1e-5).output},
                                  0);
  const auto [both_mean, both_var] = whole_statistics(cat({data, second_input}, 0));
  CHECK(allclose(shared->running_mean, both_mean, 1e-10, 1e-10));
  CHECK(allclose(shared->running_var, both_var, 1e-10, 1e-10));
  CHECK(shared->num_batches_tracked.item() == 4);

  nn::Sequential plain({std::make_shared<nn::ReLU>()});
  CHECK_THROWS_WITH(nn::recompute_batchnorm_statistics(plain, slices(data, {6})), Catch::Contains("no BatchNorm"));
}
