// DistributedDataParallel and SyncBatchNorm on 2 ranks against one process over the whole batch: the same
// parameters after a step (float64, 1e-10), the same running statistics (also with unequal per-rank batches),
// identical buffers on every rank.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/loss.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/conv.h>
#include <tapegrad/layers/flatten.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>
#include <tapegrad/optim/sgd.h>

using namespace tapegrad;
using distributed::DistributedDataParallel;
using distributed::ProcessGroup;

namespace {

constexpr double kTolerance = 1e-10;

// Largest |a - b| over two tensors of the same shape.
double max_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

void require_same_state(const nn::Module& a, const nn::Module& b, double tolerance) {
  const auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    INFO(sa[i].first);
    CHECK(max_difference(sa[i].second, sb[i].second) <= tolerance);
  }
}

// A small random float64 MLP or CNN with `with_batch_norm` BatchNorm layers; the sizes come from `generator`,
// which every rank seeds alike, while the weights come from a rank-dependent generator, so only the wrapper's
// broadcast makes the replicas equal.
struct Problem {
  std::shared_ptr<nn::Sequential> model;
  Tensor inputs, labels;
  std::int64_t classes = 0;
};

Problem make_problem(std::uint64_t seed, bool convolutional, bool with_batch_norm, std::int64_t batch, int rank) {
  Generator shape_generator(seed);
  Generator weight_generator(seed * 7919 + static_cast<std::uint64_t>(rank) + 1);
  auto pick = [&](std::int64_t low, std::int64_t high) { return randint(low, high, {}, shape_generator).item(); };
  Problem p;
  p.classes = static_cast<std::int64_t>(pick(2, 5));
  p.model = std::make_shared<nn::Sequential>();
  const auto hidden = static_cast<std::int64_t>(pick(2, 6));
  if (convolutional) {
    const auto channels = static_cast<std::int64_t>(pick(1, 3)), side = static_cast<std::int64_t>(pick(3, 5));
    nn::Conv2dOptions conv{channels, hidden, 3};
    conv.padding = 1;
    conv.dtype = DType::Float64;
    conv.generator = &weight_generator;
    p.model->push_back(std::make_shared<nn::Conv2d>(conv));
    if (with_batch_norm) p.model->push_back(std::make_shared<nn::BatchNorm2d>(hidden));
    p.model->push_back(std::make_shared<nn::ReLU>());
    p.model->push_back(std::make_shared<nn::Flatten>());
    p.model->push_back(std::make_shared<nn::Linear>(
        nn::LinearOptions{hidden * side * side, p.classes}.with_dtype(DType::Float64).with_generator(weight_generator)));
    p.inputs = randn({batch, channels, side, side}, shape_generator, TensorOptions{}.with_dtype(DType::Float64));
  } else {
    const auto features = static_cast<std::int64_t>(pick(2, 6));
    p.model->push_back(std::make_shared<nn::Linear>(
        nn::LinearOptions{features, hidden}.with_dtype(DType::Float64).with_generator(weight_generator)));
    if (with_batch_norm) p.model->push_back(std::make_shared<nn::BatchNorm1d>(hidden));
    p.model->push_back(std::make_shared<nn::ReLU>());
    p.model->push_back(std::make_shared<nn::Linear>(
        nn::LinearOptions{hidden, p.classes}.with_dtype(DType::Float64).with_generator(weight_generator)));
    p.inputs = normal({batch, features}, 3.0, 2.0, shape_generator, TensorOptions{}.with_dtype(DType::Float64));
  }
  if (with_batch_norm) p.model->to(DType::Float64);
  p.labels = randint(0, p.classes, {batch}, shape_generator);
  return p;
}

// One SGD step (momentum, weight decay) on `model` with the mean cross-entropy of (inputs, labels).
void sgd_step(nn::Module& model, optim::SGD& optimizer, const Tensor& inputs, const Tensor& labels,
              DistributedDataParallel* ddp) {
  optimizer.zero_grad();
  const Tensor logits = ddp ? ddp->forward(inputs) : model.forward(inputs);
  cross_entropy(logits, labels).backward();
  if (ddp) ddp->synchronize_gradients();
  optimizer.step();
}

optim::SGDOptions sgd_options() {
  optim::SGDOptions options;
  options.lr = 0.3;
  options.momentum = 0.9;
  options.weight_decay = 0.01;
  return options;
}

}  // namespace

TEST_CASE("construction copies rank 0's parameters and buffers to every rank") {
  const auto world = ProcessGroup::world();
  Problem p = make_problem(11, true, true, 4, world.rank());
  {
    NoGradGuard no_grad;
    p.model->at_as<nn::BatchNorm2d>(1)->running_mean.fill_(world.rank() + 0.5);  // differs per rank
  }
  DistributedDataParallel ddp(p.model, world);
  for (const auto& [name, tensor] : p.model->state()) {
    INFO(name);
    const auto all = world.allgather(tensor);
    for (const Tensor& other : all) CHECK(max_difference(other, all[0]) == 0.0);
  }
  CHECK(p.model->at_as<nn::BatchNorm2d>(1)->running_mean.to_vector()[0] == 0.5);
}

TEST_CASE("one DDP step on 2 ranks with half the batch each equals one step over the whole batch") {
  const auto world = ProcessGroup::world();
  const int ranks = world.world_size();
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const bool convolutional = seed % 2 == 0;
    const bool sync_batch_norm = seed > 2;
    INFO("seed " << seed << (convolutional ? " CNN" : " MLP") << (sync_batch_norm ? " with SyncBatchNorm" : ""));
    const std::int64_t per_rank = 3, batch = per_rank * ranks;
    Problem p = make_problem(seed, convolutional, sync_batch_norm, batch, world.rank());
    DistributedDataParallel ddp(p.model, world);
    // The single-process reference: plain BatchNorm, the whole batch, no communication.
    auto reference = std::dynamic_pointer_cast<nn::Sequential>(p.model->clone());
    if (sync_batch_norm) CHECK(distributed::convert_sync_batchnorm(*p.model, world) == 1);
    optim::SGD optimizer(p.model->parameters(), sgd_options());
    optim::SGD reference_optimizer(reference->parameters(), sgd_options());
    const std::int64_t start = world.rank() * per_rank;
    for (int step = 0; step < 2; ++step) {
      sgd_step(*p.model, optimizer, narrow(p.inputs, 0, start, per_rank), narrow(p.labels, 0, start, per_rank), &ddp);
      sgd_step(*reference, reference_optimizer, p.inputs, p.labels, nullptr);
      require_same_state(*p.model, *reference, kTolerance);
    }
    CHECK(ddp.last_bucket_count() == 1);
  }
}

TEST_CASE("SyncBatchNorm's running statistics equal BatchNorm's over the whole batch, also for unequal per-rank batches") {
  const auto world = ProcessGroup::world();
  Generator generator(42);
  for (std::int64_t rank0_rows : {1, 2, 5}) {
    // Rank r holds rank0_rows + 3r rows: unequal shares, 1 row alone included (fine, the global count is > 1).
    std::int64_t total = 0, start = 0;
    for (int r = 0; r < world.world_size(); ++r) {
      if (r == world.rank()) start = total;
      total += rank0_rows + 3 * r;
    }
    const std::int64_t mine = rank0_rows + 3 * world.rank();
    // A large mean against a small spread: the merge must not cancel the variance away.
    const Tensor inputs = normal({total, 3, 2}, 1000.0, 0.01, generator, TensorOptions{}.with_dtype(DType::Float64));
    nn::BatchNormOptions options{3};
    options.momentum = std::nullopt;  // cumulative: every batch weighs the same
    distributed::SyncBatchNorm sync(options, world);
    nn::BatchNorm1d plain(options);
    sync.to(DType::Float64);
    plain.to(DType::Float64);
    for (int step = 0; step < 3; ++step) {
      const Tensor batch = mul(inputs, 1.0 + step);
      const Tensor out = sync.forward(narrow(batch, 0, start, mine));
      const Tensor expected = plain.forward(batch);
      CHECK(max_difference(out, narrow(expected, 0, start, mine)) <= 1e-8);
    }
    CHECK(max_difference(sync.running_mean, plain.running_mean) <= 1e-9);
    CHECK(max_difference(sync.running_var, plain.running_var) <= 1e-12);
    CHECK(sync.num_batches_tracked.item() == 3);
  }
}

TEST_CASE("SyncBatchNorm's input gradient equals BatchNorm's over the whole batch for unequal per-rank batches") {
  const auto world = ProcessGroup::world();
  Generator generator(7);
  const std::int64_t mine = 2 + world.rank();
  std::int64_t total = 0, start = 0;
  for (int r = 0; r < world.world_size(); ++r) {
    if (r == world.rank()) start = total;
    total += 2 + r;
  }
  const auto f64 = TensorOptions{}.with_dtype(DType::Float64);
  const Tensor x = randn({total, 4}, generator, f64), weight = randn({4}, generator, f64),
               bias = randn({4}, generator, f64), upstream = randn({total, 4}, generator, f64);
  Tensor local = narrow(x, 0, start, mine).clone().requires_grad_();
  Tensor w = weight.clone().requires_grad_();
  auto result = distributed::sync_batch_norm_train(local, w, bias, 1e-5, world);
  sum(mul(result.output, narrow(upstream, 0, start, mine))).backward();
  Tensor whole = x.clone().requires_grad_();
  Tensor w_reference = weight.clone().requires_grad_();
  auto expected = batch_norm_train(whole, w_reference, bias, 1e-5);
  sum(mul(expected.output, upstream)).backward();
  CHECK(result.global_count == total);
  CHECK(max_difference(local.grad(), narrow(whole.grad(), 0, start, mine)) <= kTolerance);
  // dweight is this rank's share; summed over ranks it is the whole batch's.
  Tensor share = w.grad().clone();
  world.allreduce(share);
  CHECK(max_difference(share, w_reference.grad()) <= kTolerance);
}

TEST_CASE("with broadcast_buffers every rank's plain BatchNorm buffers equal rank 0's after each step") {
  const auto world = ProcessGroup::world();
  Problem p = make_problem(5, false, true, 4, world.rank());
  distributed::DataParallelOptions options;
  options.broadcast_buffers = true;
  options.bucket_bytes = 64;  // several buckets for this small model
  DistributedDataParallel ddp(p.model, world, options);
  optim::SGD optimizer(p.model->parameters(), sgd_options());
  Tensor rank0_mean;
  for (int step = 0; step < 3; ++step) {
    // Each rank sees different data, so without the broadcast the running statistics would drift apart.
    const Tensor inputs = mul(p.inputs, 1.0 + world.rank());
    sgd_step(*p.model, optimizer, inputs, p.labels, &ddp);
    ddp.broadcast_buffers();  // what the next forward does first
    for (const auto& [name, tensor] : p.model->named_buffers()) {
      INFO(name);
      const auto all = world.allgather(tensor);
      for (const Tensor& other : all) CHECK(max_difference(other, all[0]) == 0.0);
    }
    for (const auto& [name, tensor] : p.model->named_parameters()) {
      INFO(name);
      const auto all = world.allgather(tensor);
      for (const Tensor& other : all) CHECK(max_difference(other, all[0]) == 0.0);
    }
  }
  CHECK(ddp.last_bucket_count() > 1);
}

TEST_CASE("convert_sync_batchnorm keeps parameters, buffers and mode, and its state loads into BatchNorm") {
  const auto world = ProcessGroup::world();
  Problem p = make_problem(3, true, true, 4, world.rank());
  {
    NoGradGuard no_grad;
    p.model->at_as<nn::BatchNorm2d>(1)->running_var.fill_(2.5);
    p.model->at_as<nn::BatchNorm2d>(1)->weight.fill_(-1.5);
  }
  p.model->eval();
  const auto before = p.model->state();
  CHECK(distributed::convert_sync_batchnorm(*p.model, world) == 1);
  auto sync = p.model->at_as<distributed::SyncBatchNorm>(1);
  CHECK_FALSE(sync->is_training());
  const auto after = p.model->state();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].first == before[i].first);
    CHECK(max_difference(after[i].second, before[i].second) == 0.0);
  }
  nn::BatchNorm2d back(sync->options());
  back.to(DType::Float64);
  back.load_state(sync->state());
  CHECK(back.running_var.to_vector() == sync->running_var.to_vector());
  CHECK(distributed::convert_sync_batchnorm(*p.model, world) == 0);
}
