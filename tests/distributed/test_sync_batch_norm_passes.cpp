// SyncBatchNorm's local passes in each of their visiting orders equal BatchNorm over the global batch: memory order
// (a tensor of at most 16 MiB with S > 1) on one thread and split over two, channel order for [N, C] inputs and
// for tensors over 16 MiB, in float32 and float64; output, input gradient and the summed parameter gradients.
// Note: CHECK, never REQUIRE, so that a failure on one rank cannot leave the other waiting in a collective.
#include <catch2/catch.hpp>

#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/framework/parallel.h>
#include <tapegrad/layers/batch_norm.h>

using namespace tapegrad;
using distributed::ProcessGroup;

namespace {

double max_difference(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item(); }

// With `identical_shares`, every rank holds the same values (the global batch is world_size copies of one share),
// so the global statistics are those of one share and each rank's output, dx and parameter-gradient share are
// BatchNorm's over that share: the reference is half the size (for the 16 MiB case, whose time is its memory).
void check_against_batch_norm(const Shape& per_rank, DType dtype, int threads, bool identical_shares = false) {
  const auto world = ProcessGroup::world();
  const int previous_threads = get_num_threads();
  set_num_threads(threads);
  Generator generator(5);
  const auto options = TensorOptions{}.with_dtype(dtype);
  const std::int64_t rows = per_rank[0], channels = per_rank[1];
  Shape global = per_rank;
  global[0] = identical_shares ? rows : rows * world.world_size();
  const std::int64_t start = identical_shares ? 0 : rows * world.rank();
  // An offset mean, so that the shifted sums matter; the same values on every rank (same seed). Uniform values:
  // cheaper to draw than normal ones for the 16 MiB case.
  const Tensor x = uniform(global, 2.0, 9.0, generator, options);
  const Tensor upstream = uniform(global, -1.0, 1.0, generator, options);

  distributed::SyncBatchNorm sync(nn::BatchNormOptions{channels}, world);
  nn::BatchNorm2d plain(nn::BatchNormOptions{channels});
  sync.to(dtype);
  plain.to(dtype);
  Tensor local = narrow(x, 0, start, rows).clone().requires_grad_();
  const Tensor out = sync.forward(local);
  sum(mul(out, narrow(upstream, 0, start, rows))).backward();
  Tensor whole = x.clone().requires_grad_();
  // BatchNorm2d over the same values seen as [N, C, S, 1] (its own kernels choose their order by that shape).
  const Tensor expected = plain.forward(whole.reshape({global[0], channels, -1, 1})).reshape(global);
  sum(mul(expected, upstream)).backward();
  Tensor weight_share = sync.weight.grad().clone(), bias_share = sync.bias.grad().clone();
  if (!identical_shares) {
    world.allreduce(weight_share);
    world.allreduce(bias_share);
  }
  set_num_threads(previous_threads);

  const double tolerance = dtype == DType::Float64 ? 1e-10 : 2e-5;
  INFO(shape_string(per_rank) << " per rank, " << dtype_name(dtype) << ", " << threads << " thread(s)");
  CHECK(max_difference(out, narrow(expected, 0, start, rows)) <= tolerance);
  CHECK(max_difference(local.grad(), narrow(whole.grad(), 0, start, rows)) <= tolerance);
  // Sums over all values of a channel: relative to their size.
  CHECK(max_difference(weight_share, plain.weight.grad()) <= tolerance * static_cast<double>(x.numel() / channels));
  CHECK(max_difference(bias_share, plain.bias.grad()) <= tolerance * static_cast<double>(x.numel() / channels));
  CHECK(max_difference(sync.running_mean, plain.running_mean) <= tolerance);
  // (The running variance is unbiased over the global count, which identical shares multiply.)
  if (!identical_shares) CHECK(max_difference(sync.running_var, plain.running_var) <= tolerance);
}

}  // namespace

TEST_CASE("SyncBatchNorm in memory order (up to 16 MiB), one thread and two, equals BatchNorm over the global batch") {
  for (DType dtype : {DType::Float32, DType::Float64})
    for (int threads : {1, 2}) check_against_batch_norm({8, 8, 24, 24}, dtype, threads);
}

TEST_CASE("SyncBatchNorm in channel order ([N, C], and over 16 MiB) equals BatchNorm over the global batch") {
  for (DType dtype : {DType::Float32, DType::Float64}) check_against_batch_norm({16, 7}, dtype, 1);
  // 2 x 2 x 1024 x 520 float64 per rank: 16.25 MiB.
  check_against_batch_norm({2, 2, 1024, 520}, DType::Float64, 1, /*identical_shares=*/true);
}
