// Communication behind backward: DDP's bucket allreduces started during backward give bit for bit the weights
// of the allreduce after backward (and, on 2 ranks, of the blocking MPI_Allreduce of each gradient), with any
// bucket sizes, SyncBatchNorm communicating in between, parameters unused on some ranks, no_sync accumulation
// and create_graph; and they do start before backward ends.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/loss.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/conv.h>
#include <tapegrad/layers/flatten.h>
#include <tapegrad/layers/linear.h>
#include <tapegrad/layers/sequential.h>
#include <tapegrad/optim/sgd.h>

using namespace tapegrad;
using distributed::DataParallelOptions;
using distributed::DistributedDataParallel;
using distributed::ProcessGroup;

namespace {

// Conv-BN-ReLU x2, Linear, float32 (the DDP example's shape, small): the same weights on every rank.
std::shared_ptr<nn::Sequential> make_cnn() {
  Generator generator(5);
  auto conv = [&](std::int64_t in, std::int64_t out) {
    nn::Conv2dOptions options{in, out, 3};
    options.padding = 1;
    options.generator = &generator;
    return std::make_shared<nn::Conv2d>(options);
  };
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(conv(2, 4));
  model->push_back(std::make_shared<nn::BatchNorm2d>(4));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(conv(4, 6));
  model->push_back(std::make_shared<nn::BatchNorm2d>(6));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Flatten>());
  model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{6 * 5 * 5, 3}.with_generator(generator)));
  return model;
}

optim::SGDOptions sgd_options() {
  optim::SGDOptions options;
  options.lr = 0.05;
  options.momentum = 0.9;
  return options;
}

// Each rank's own batch for `step`.
std::pair<Tensor, Tensor> batch_of(int rank, int step) {
  Generator generator(1000 + static_cast<std::uint64_t>(100 * rank + step));
  return {randn({4, 2, 5, 5}, generator), randint(0, 3, {4}, generator)};
}

void require_identical(const nn::Module& a, const nn::Module& b) {
  const auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    INFO(sa[i].first);
    CHECK(sa[i].second.to_vector() == sb[i].second.to_vector());
  }
}

struct Trained {
  std::shared_ptr<nn::Sequential> model;
  distributed::ReducerStatistics statistics;
  std::size_t buckets = 0;
};

// `steps` SGD steps. mode: "overlap", "after" (overlap off), "mpi_allreduce" (no DDP reducer: each gradient
// through ProcessGroup::allreduce, the blocking MPI_Allreduce, then the same mean).
Trained train(const std::string& mode, bool sync_batch_norm, DataParallelOptions options, int steps = 3) {
  const auto world = ProcessGroup::world();
  Trained out{make_cnn(), {}, 0};
  if (sync_batch_norm) distributed::convert_sync_batchnorm(*out.model, world);
  options.overlap_communication = mode == "overlap";
  DistributedDataParallel ddp(out.model, world, options);
  optim::SGD optimizer(out.model->parameters(), sgd_options());
  for (int step = 0; step < steps; ++step) {
    const auto [inputs, labels] = batch_of(world.rank(), step);
    optimizer.zero_grad();
    cross_entropy(ddp.forward(inputs), labels).backward();
    if (mode == "mpi_allreduce") {
      NoGradGuard no_grad;
      for (Tensor p : out.model->parameters()) {
        Tensor g = p.grad().clone();
        world.allreduce(g, distributed::ReduceOp::Mean);
        p.set_grad(g);
      }
    } else {
      ddp.synchronize_gradients();
    }
    optimizer.step();
  }
  out.statistics = ddp.reducer().statistics();
  out.buckets = ddp.last_bucket_count();
  return out;
}

// A parameter rank 0 uses and the others do not, and one nobody uses.
struct Branchy : nn::Module {
  Tensor a, b, unused;
  int rank;
  explicit Branchy(int r) : Module("Branchy"), rank(r) {
    Generator generator(3);
    a = register_parameter("a", randn({3}, generator));
    b = register_parameter("b", randn({3}, generator));
    unused = register_parameter("unused", randn({3}, generator));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x * a;
    if (rank == 0) y = y * b;
    return y;
  }
};

}  // namespace

TEST_CASE("bucket assignment is PyTorch's (torch 1.13 _compute_bucket_assignment_by_size)") {
  const std::vector<Tensor> tensors{zeros({10}), zeros({20}), zeros({5}, TensorOptions{}.with_dtype(DType::Float64)),
                                    zeros({30}), zeros({40}), zeros({7}, TensorOptions{}.with_dtype(DType::Float64)),
                                    zeros({1})};
  using Buckets = std::vector<std::vector<std::size_t>>;
  CHECK(distributed::compute_bucket_assignment_by_size(tensors, {100, 150}) == Buckets{{0, 1}, {2, 5}, {3, 4}, {6}});
  CHECK(distributed::compute_bucket_assignment_by_size(tensors, {60}) == Buckets{{0, 1}, {2, 5}, {3}, {4}, {6}});
}

TEST_CASE("overlapped bucket allreduces give bit for bit the weights of averaging after backward, any bucket size") {
  const auto world = ProcessGroup::world();
  for (const bool sync_batch_norm : {false, true}) {
    for (const std::size_t bucket_bytes : {std::size_t{25} << 20, std::size_t{2048}, std::size_t{64}}) {
      INFO((sync_batch_norm ? "SyncBatchNorm" : "BatchNorm") << ", bucket_bytes " << bucket_bytes);
      DataParallelOptions options;
      options.bucket_bytes = bucket_bytes;
      options.first_bucket_bytes = 256;
      const Trained overlapped = train("overlap", sync_batch_norm, options);
      const Trained after = train("after", sync_batch_norm, options);
      require_identical(*overlapped.model, *after.model);
      CHECK(overlapped.statistics.overlapped == 3);
      CHECK(after.statistics.overlapped == 0);
      CHECK(overlapped.buckets == after.buckets);
      if (bucket_bytes == 64) {
        // One bucket per parameter or so: all but the last-final ones start while backward still runs.
        CHECK(overlapped.buckets >= 5);
        CHECK(overlapped.statistics.buckets_started_early >= 3 * (overlapped.buckets - 2));
      }
      // Note: on 2 ranks every allreduce computes a0 + a1 per element, so this also pins the result to the
      // blocking MPI_Allreduce DDP used before the overlap; with more ranks MPI may associate the sum
      // differently there (the in-place MPI_Iallreduce DDP uses always associates it the same way).
      if (world.world_size() == 2) require_identical(*overlapped.model, *train("mpi_allreduce", sync_batch_norm, options).model);
    }
  }
}

TEST_CASE("a parameter some ranks do not use counts as zero there; one no rank uses keeps no gradient") {
  const auto world = ProcessGroup::world();
  std::vector<std::vector<double>> b_grads;
  for (const bool overlap : {true, false}) {
    auto model = std::make_shared<Branchy>(world.rank());
    DataParallelOptions options;
    options.overlap_communication = overlap;
    options.bucket_bytes = 8;  // a bucket per parameter
    DistributedDataParallel ddp(model, world, options);
    const Tensor x = full({3}, 1.0 + world.rank());
    sum(ddp.forward(x)).backward();
    ddp.synchronize_gradients();
    REQUIRE(model->b.grad().defined());
    CHECK_FALSE(model->unused.grad().defined());
    const auto everyone = world.allgather(model->b.grad());
    for (const Tensor& other : everyone) CHECK(other.to_vector() == everyone[0].to_vector());
    b_grads.push_back(model->b.grad().to_vector());
    CHECK(ddp.reducer().statistics().overlapped == (overlap ? 1u : 0u));
  }
  CHECK(b_grads[0] == b_grads[1]);
}

TEST_CASE("no_sync accumulation and a create_graph backward average the same bits as without overlap") {
  const auto world = ProcessGroup::world();
  std::vector<std::shared_ptr<nn::Sequential>> models;
  for (const bool overlap : {true, false}) {
    auto model = make_cnn();
    DataParallelOptions options;
    options.overlap_communication = overlap;
    options.bucket_bytes = 512;
    DistributedDataParallel ddp(model, world, options);
    optim::SGD optimizer(model->parameters(), sgd_options());
    // Two micro-batches per step, the first under no_sync.
    for (int step = 0; step < 2; ++step) {
      optimizer.zero_grad();
      {
        auto guard = ddp.no_sync();
        const auto [inputs, labels] = batch_of(world.rank(), 2 * step);
        cross_entropy(ddp.forward(inputs), labels).backward();
      }
      CHECK(ddp.reducer().statistics().reductions == static_cast<std::size_t>(step));
      const auto [inputs, labels] = batch_of(world.rank(), 2 * step + 1);
      cross_entropy(ddp.forward(inputs), labels).backward();
      ddp.synchronize_gradients();
      optimizer.step();
    }
    CHECK(ddp.reducer().statistics().overlapped == (overlap ? 2u : 0u));
    // A create_graph pass is left to synchronize_gradients().
    optimizer.zero_grad();
    const auto [inputs, labels] = batch_of(world.rank(), 9);
    cross_entropy(ddp.forward(inputs), labels).backward(Tensor(), false, /*create_graph=*/true);
    ddp.synchronize_gradients();
    optimizer.step();
    CHECK(ddp.reducer().statistics().overlapped == (overlap ? 2u : 0u));
    CHECK(ddp.reducer().statistics().reductions == 3);
    models.push_back(model);
  }
  require_identical(*models[0], *models[1]);
}

TEST_CASE("a second backward after the overlapped averaging is refused by synchronize_gradients on every rank") {
  const auto world = ProcessGroup::world();
  auto model = make_cnn();
  DistributedDataParallel ddp(model, world);
  const auto [inputs, labels] = batch_of(world.rank(), 0);
  const Tensor loss = cross_entropy(ddp.forward(inputs), labels);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK_THROWS_WITH(ddp.synchronize_gradients(), Catch::Contains("a gradient changed after backward averaged it"));
}
