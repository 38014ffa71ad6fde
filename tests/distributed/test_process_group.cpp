// The process group's collectives on 2 (or more) ranks: values, dtypes, in-place semantics and mismatch errors.
#include <catch2/catch.hpp>

#include <tapegrad/framework/distributed/process_group.h>
#include <tapegrad/framework/autograd/grad_mode.h>

using namespace tapegrad;
using distributed::ProcessGroup;
using distributed::ReduceOp;

namespace {
// Sum over ranks of (r + 1) * base: what allreduce(sum) of rank r holding (r + 1) * base gives.
double rank_sum(int world_size) { return world_size * (world_size + 1) / 2.0; }
}  // namespace

TEST_CASE("the world has rank and size from mpirun") {
  const auto world = ProcessGroup::world();
  REQUIRE(world.world_size() >= 2);
  REQUIRE(world.rank() >= 0);
  REQUIRE(world.rank() < world.world_size());
  world.barrier();
}

TEST_CASE("allreduce sums and averages float32, float64 and int64 in place") {
  const auto world = ProcessGroup::world();
  const double factor = world.rank() + 1;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor t = from_vector(std::vector<double>{1.0 * factor, -2.5 * factor, 0.0}, {3}, TensorOptions{}.with_dtype(dtype));
    const auto version = t.version();
    world.allreduce(t);
    CHECK(t.version() > version);
    CHECK(t.to_vector() == std::vector<double>{rank_sum(world.world_size()), -2.5 * rank_sum(world.world_size()), 0.0});
    Tensor m = full({2, 2}, factor, TensorOptions{}.with_dtype(dtype));
    world.allreduce(m, ReduceOp::Mean);
    CHECK(m.to_vector() == std::vector<double>(4, rank_sum(world.world_size()) / world.world_size()));
  }
  Tensor counts = from_vector(std::vector<std::int64_t>{world.rank(), 1, (std::int64_t{1} << 40)}, {3});
  world.allreduce(counts);
  const std::int64_t w = world.world_size();
  CHECK(counts.to_vector() == std::vector<double>{double(w * (w - 1) / 2), double(w), double(w << 40)});
  CHECK_THROWS_WITH(world.allreduce(counts, ReduceOp::Mean), Catch::Contains("mean needs a float32 or float64"));
}

TEST_CASE("broadcast copies root's values to every rank") {
  const auto world = ProcessGroup::world();
  for (int root = 0; root < world.world_size(); ++root) {
    Tensor t = full({2, 3}, 10.0 * world.rank() + 1, TensorOptions{}.with_dtype(DType::Float64));
    world.broadcast(t, root);
    CHECK(t.to_vector() == std::vector<double>(6, 10.0 * root + 1));
  }
  Tensor labels = from_vector(std::vector<std::int64_t>{world.rank(), 7}, {2});
  world.broadcast(labels, 1);
  CHECK(labels.to_vector() == std::vector<double>{1, 7});
  CHECK_THROWS_WITH(world.broadcast(labels, world.world_size()), Catch::Contains("is not a rank"));
}

TEST_CASE("allgather returns every rank's tensor in rank order") {
  const auto world = ProcessGroup::world();
  const Tensor mine = from_vector(std::vector<float>{float(world.rank()), float(-world.rank())}, {1, 2});
  const auto all = world.allgather(mine);
  REQUIRE(all.size() == static_cast<std::size_t>(world.world_size()));
  for (int r = 0; r < world.world_size(); ++r) {
    CHECK(all[r].shape() == Shape{1, 2});
    CHECK(all[r].dtype() == DType::Float32);
    CHECK(all[r].to_vector() == std::vector<double>{double(r), double(-r)});
  }
}

TEST_CASE("a shape or dtype that differs between ranks is an error on every rank naming each rank's shape") {
  const auto world = ProcessGroup::world();
  Tensor uneven = zeros({world.rank() + 1, 2});
  CHECK_THROWS_WITH(world.allreduce(uneven),
                    Catch::Contains("allreduce: every rank must pass the same dtype and shape") &&
                        Catch::Contains("rank 0: float32 [1, 2]") && Catch::Contains("rank 1: float32 [2, 2]"));
  Tensor mixed = zeros({3}, TensorOptions{}.with_dtype(world.rank() == 0 ? DType::Float32 : DType::Float64));
  CHECK_THROWS_WITH(world.broadcast(mixed), Catch::Contains("broadcast") && Catch::Contains("float64 [3]"));
  CHECK_THROWS_WITH(world.allgather(uneven), Catch::Contains("allgather: every rank must pass the same"));
}

TEST_CASE("an in-place collective on a tensor that requires grad is refused in grad mode") {
  const auto world = ProcessGroup::world();
  Tensor parameter = ones({2}, TensorOptions{}.with_requires_grad());
  CHECK_THROWS_WITH(world.allreduce(parameter), Catch::Contains("requires grad while grad mode is on"));
  {
    NoGradGuard no_grad;
    world.allreduce(parameter);
  }
  CHECK(parameter.to_vector() == std::vector<double>(2, world.world_size()));
}
