// batch_norm_train's kernels take one of two visiting orders (memory order for tensors that fit the cache,
// channel by channel for bigger ones) and split the work over threads; every combination must give the
// composed formula's output and gradients, in float64 to 1e-10; batch_norm_eval's affine map likewise.
#include <catch2/catch.hpp>

#include <tapegrad/framework/ops/batch_norm.h>
#include <tapegrad/tapegrad.h>

using namespace tapegrad;

namespace {

constexpr double kEps = 1e-5;

double max_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return max(abs(a - b)).item();
}

struct Gradients {
  Tensor output, dx, dweight, dbias;
};

// sum(batch_norm(x) * upstream) and its gradients, by the fused op or by composed reductions.
Gradients run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& upstream, bool fused) {
  Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  Tensor output;
  if (fused) {
    output = batch_norm_train(x, w, b, kEps).output;
  } else {
    const std::vector<std::int64_t> dims{0, 2, 3};
    const Shape channel{1, x0.size(1), 1, 1};
    const Tensor centered = x - mean(x, dims, true);
    output = centered / sqrt(var(x, dims, 0, true) + kEps) * w.reshape(channel) + b.reshape(channel);
  }
  sum(output * upstream).backward();
  return {output.detach(), x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("batch_norm_train agrees with the composed formula on both visiting orders and 1 or 2 threads") {
  const int threads_before = get_num_threads();
  const auto f64 = TensorOptions{}.with_dtype(DType::Float64);
  // Small (memory order, one thread), 256 KB (memory order, split over threads), 34 MB (channel order).
  for (const Shape& shape : {Shape{4, 3, 5, 6}, Shape{8, 4, 32, 32}, Shape{4, 2, 730, 730}}) {
    Generator generator(static_cast<std::uint64_t>(shape[2]));
    const Tensor x = randn(shape, generator, f64) * 3.0 + 2.0, upstream = randn(shape, generator, f64);
    const Tensor weight = randn({shape[1]}, generator, f64), bias = randn({shape[1]}, generator, f64);
    set_num_threads(1);
    const Gradients expected = run(x, weight, bias, upstream, /*fused=*/false);
    for (const int threads : {1, 2}) {
      INFO("shape " << shape_string(shape) << ", " << threads << " thread(s)");
      set_num_threads(threads);
      const Gradients got = run(x, weight, bias, upstream, /*fused=*/true);
      CHECK(max_difference(got.output, expected.output) <= 1e-10);
      CHECK(max_difference(got.dx, expected.dx) <= 1e-10);
      CHECK(max_difference(got.dweight, expected.dweight) <= 1e-10 * static_cast<double>(x.numel()));
      CHECK(max_difference(got.dbias, expected.dbias) <= 1e-10 * static_cast<double>(x.numel()));
    }
  }
  set_num_threads(threads_before);
}

TEST_CASE("batch_norm_eval agrees with the composed formula on every visiting order and 1 or 2 threads") {
  const int threads_before = get_num_threads();
  const auto f64 = TensorOptions{}.with_dtype(DType::Float64);
  // [N, C] rows (one row; many rows, split over threads), one sample of [C, H, W] (per channel), [N, C, H, W]
  // (memory order, split over threads when big).
  for (const Shape& shape : {Shape{1, 9}, Shape{600, 70}, Shape{1, 3, 5, 6}, Shape{4, 3, 5, 6}, Shape{8, 4, 32, 32}}) {
    Generator generator(static_cast<std::uint64_t>(shape_numel(shape)));
    const Shape channel = shape.size() == 2 ? Shape{1, shape[1]} : Shape{1, shape[1], 1, 1};
    const Tensor x = randn(shape, generator, f64) * 3.0 + 2.0, upstream = randn(shape, generator, f64);
    const Tensor weight = randn({shape[1]}, generator, f64), bias = randn({shape[1]}, generator, f64);
    const Tensor mean = randn({shape[1]}, generator, f64), var = rand({shape[1]}, generator, f64) + 0.5;
    const Tensor scale = weight / sqrt(var + kEps);
    const Tensor expected = (x - mean.reshape(channel)) * scale.reshape(channel) + bias.reshape(channel);
    for (const int threads : {1, 2}) {
      INFO("shape " << shape_string(shape) << ", " << threads << " thread(s)");
      set_num_threads(threads);
      const Tensor leaf = x.clone().requires_grad_();
      const Tensor output = batch_norm_eval(leaf, mean, var, weight, bias, kEps);
      sum(output * upstream).backward();
      CHECK(max_difference(output, expected) <= 1e-12);
      CHECK(max_difference(leaf.grad(), upstream * scale.reshape(channel)) <= 1e-12);
    }
  }
  set_num_threads(threads_before);
}
