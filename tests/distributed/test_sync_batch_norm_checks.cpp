// SyncBatchNorm's agreement checks between ranks once the per-collective shape check is off (which the layer
// does after its first training step, to make one collective per layer and direction): a dtype mixed between
// ranks is still an error on every rank, a layer whose channels differ between ranks fails on its first step,
// and later steps still equal BatchNorm over the global batch.
// Note: CHECK, never REQUIRE, so that a failure on one rank cannot leave the other waiting in a collective.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/layers/batch_norm.h>
#include <tapegrad/layers/sequential.h>

using namespace tapegrad;
using distributed::ProcessGroup;

namespace {

double max_difference(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item(); }

}  // namespace

TEST_CASE("with the shape check off, a dtype that differs between ranks is an error on every rank") {
  auto world = ProcessGroup::world();
  world.set_check_shapes(false);
  const DType dtype = world.rank() == 0 ? DType::Float32 : DType::Float64;
  const Tensor x = ones({3, 2, 4}, TensorOptions{}.with_dtype(dtype));
  CHECK_THROWS_WITH(distributed::sync_batch_norm_train(x, Tensor(), Tensor(), 1e-5, world),
                    Catch::Contains("sync_batch_norm_train: every rank must pass the same dtype") &&
                        Catch::Contains("float32") && Catch::Contains("float64"));
}

TEST_CASE("a SyncBatchNorm whose channels differ between ranks fails on its first training step on every rank") {
  const auto world = ProcessGroup::world();
  const std::int64_t channels = 3 + world.rank();
  distributed::SyncBatchNorm layer(nn::BatchNormOptions{channels}, world);
  CHECK_THROWS_WITH(layer.forward(ones({4, channels})),
                    Catch::Contains("allgather: every rank must pass the same dtype and shape"));
}

TEST_CASE("SyncBatchNorm's later steps (one collective per direction) equal BatchNorm over the global batch") {
  const auto world = ProcessGroup::world();
  Generator generator(11);
  const auto f32 = TensorOptions{}.with_dtype(DType::Float32);
  const std::int64_t rows = 4;
  const std::int64_t total = rows * world.world_size(), start = rows * world.rank();
  distributed::SyncBatchNorm sync(nn::BatchNormOptions{5}, world);
  nn::BatchNorm2d plain(nn::BatchNormOptions{5});
  for (int step = 0; step < 3; ++step) {
    // float32 conv-like maps with an offset mean: the one-pass shifted sums must match BatchNorm's kernel.
    const Tensor x = add(normal({total, 5, 6, 7}, 3.0, 2.0, generator, f32), static_cast<double>(step));
    const Tensor upstream = randn({total, 5, 6, 7}, generator, f32);
    Tensor local = narrow(x, 0, start, rows).clone().requires_grad_();
    const Tensor out = sync.forward(local);
    sum(mul(out, narrow(upstream, 0, start, rows))).backward();
    Tensor whole = x.clone().requires_grad_();
    const Tensor expected = plain.forward(whole);
    sum(mul(expected, upstream)).backward();
    INFO("step " << step);
    CHECK(max_difference(out, narrow(expected, 0, start, rows)) <= 1e-5);
    CHECK(max_difference(local.grad(), narrow(whole.grad(), 0, start, rows)) <= 1e-5);
  }
  // The parameters' gradients (accumulated over the steps) are this rank's shares; summed they are BatchNorm's.
  Tensor weight_share = sync.weight.grad().clone(), bias_share = sync.bias.grad().clone();
  world.allreduce(weight_share);
  world.allreduce(bias_share);
  CHECK(max_difference(weight_share, plain.weight.grad()) <= 1e-3);
  CHECK(max_difference(bias_share, plain.bias.grad()) <= 1e-3);
  CHECK(max_difference(sync.running_mean, plain.running_mean) <= 1e-5);
  CHECK(max_difference(sync.running_var, plain.running_var) <= 1e-5);
}

TEST_CASE("convert_sync_batchnorm replaces a BatchNorm3d by a SyncBatchNorm that takes its 5-d input") {
  const auto world = ProcessGroup::world();
  Generator generator(3);
  nn::Sequential model(nn::BatchNorm3d(nn::BatchNormOptions{2}));
  auto plain = std::make_shared<nn::BatchNorm3d>(nn::BatchNormOptions{2});
  CHECK(distributed::convert_sync_batchnorm(model, world) == 1);
  const std::int64_t rows = 2, total = rows * world.world_size();
  const Tensor x = randn({total, 2, 3, 2, 2}, generator);
  const Tensor out = model.forward(narrow(x, 0, rows * world.rank(), rows));
  const Tensor expected = plain->forward(x);
  CHECK(out.shape() == Shape{rows, 2, 3, 2, 2});
  CHECK(max_difference(out, narrow(expected, 0, rows * world.rank(), rows)) <= 1e-5);
  CHECK_THROWS_WITH(model.forward(ones({1, 2, 1, 1, 1, 1})),
                    Catch::Contains("[N, C, D, H, W], got [1, 2, 1, 1, 1, 1]"));
}

TEST_CASE("tapegrad's MPI initialization lets Open MPI yield while a rank waits (unless the user chose)") {
  ProcessGroup::world();
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  CHECK(yield != nullptr);
}
