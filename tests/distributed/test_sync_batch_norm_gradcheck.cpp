// sync_batch_norm_train's gradient, checked on 2 ranks against central finite differences of the global loss,
// over random shapes (2-d, 3-d, 4-d), unequal per-rank batches and values, in float64.
// Note: not RapidCheck: every rank must draw the same case and make the same collective calls in the same
// order, so the cases come from a tapegrad Generator seeded alike on every rank; and comparisons use CHECK,
// never REQUIRE, so that a failure on one rank cannot leave the other waiting in a collective.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/ops/elementwise.h>
#include <tapegrad/framework/ops/reduction.h>
#include <tapegrad/framework/ops/shape_ops.h>

using namespace tapegrad;
using distributed::ProcessGroup;

namespace {

constexpr double kStep = 1e-6;
constexpr double kTolerance = 1e-6;  // relative to 1 + |finite difference|
constexpr double kEps = 1e-5;

const TensorOptions kF64 = TensorOptions{}.with_dtype(DType::Float64);

std::int64_t draw(Generator& generator, std::int64_t low, std::int64_t high) {
  return low +
         static_cast<std::int64_t>(generator.uniform01() * static_cast<double>(high - low + 1)) % (high - low + 1);
}

// One random case, identical on every rank: the global input, this rank's rows of it, affine parameters.
struct Case {
  Shape global_shape;
  std::int64_t start = 0, rows = 0;
  Tensor x, weight, bias, upstream;  // x and upstream: the global tensors
};

Case make_case(std::uint64_t seed, const ProcessGroup& world) {
  Generator generator(seed);
  Case c;
  const std::int64_t channels = draw(generator, 1, 3);
  const std::int64_t spatial_dims = draw(generator, 0, 2);
  std::int64_t total = 0;
  for (int r = 0; r < world.world_size(); ++r) {
    const std::int64_t rows = draw(generator, 1, 3);
    if (r == world.rank()) c.start = total, c.rows = rows;
    total += rows;
  }
  c.global_shape = {total, channels};
  for (std::int64_t d = 0; d < spatial_dims; ++d) c.global_shape.push_back(draw(generator, 1, 3));
  // Note: values spread over a few units around an offset, so the variance is well away from eps.
  c.x = add(mul(randn(c.global_shape, generator, kF64), 2.0), 0.5);
  const bool affine = generator.uniform01() < 0.75;
  if (affine) {
    c.weight = randn({channels}, generator, kF64);
    c.bias = randn({channels}, generator, kF64);
  }
  c.upstream = randn(c.global_shape, generator, kF64);
  return c;
}

// The loss summed over ranks: sum(output * upstream) of every rank's rows, on every rank.
double global_loss(const Case& c, const Tensor& local_x, const Tensor& weight, const Tensor& bias,
                   const ProcessGroup& world) {
  NoGradGuard no_grad;
  const auto result = distributed::sync_batch_norm_train(local_x, weight, bias, kEps, world);
  Tensor loss = sum(mul(result.output, narrow(c.upstream, 0, c.start, c.rows))).reshape({1}).clone();
  world.allreduce(loss);
  return loss.item();
}

// Central difference of the global loss in element `index` of `target`, perturbed on the ranks where
// `perturb_here` holds (the owner of an input element, or every rank for a replicated parameter).
double finite_difference(const Case& c, Tensor& target, std::int64_t index, bool perturb_here, const Tensor& local_x,
                         const Tensor& weight, const Tensor& bias, const ProcessGroup& world) {
  double* value = target.data<double>();
  const double saved = perturb_here ? value[index] : 0.0;
  if (perturb_here) value[index] = saved + kStep;
  const double plus = global_loss(c, local_x, weight, bias, world);
  if (perturb_here) value[index] = saved - kStep;
  const double minus = global_loss(c, local_x, weight, bias, world);
  if (perturb_here) value[index] = saved;
  return (plus - minus) / (2 * kStep);
}

}  // namespace

TEST_CASE("sync_batch_norm_train's gradients equal finite differences of the global loss, random shapes and shares") {
  const auto world = ProcessGroup::world();
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const Case c = make_case(seed, world);
    INFO("case " << seed << ": global input " << shape_string(c.global_shape) << ", this rank's rows " << c.start
                 << ".." << c.start + c.rows << (c.weight.defined() ? ", affine" : ", no affine"));
    // Analytic: this rank's rows of the input gradient, and this rank's share of the parameter gradients.
    Tensor local_x = narrow(c.x, 0, c.start, c.rows).clone().requires_grad_();
    Tensor weight = c.weight.defined() ? c.weight.clone().requires_grad_() : Tensor();
    Tensor bias = c.bias.defined() ? c.bias.clone().requires_grad_() : Tensor();
    const auto result = distributed::sync_batch_norm_train(local_x, weight, bias, kEps, world);
    sum(mul(result.output, narrow(c.upstream, 0, c.start, c.rows))).backward();
    const std::vector<double> dx = local_x.grad().to_vector();

    // Finite differences, element by element of the global input: every rank takes part in every one.
    Tensor probe_x = narrow(c.x, 0, c.start, c.rows).clone();
    const std::int64_t per_row = c.x.numel() / c.global_shape[0];
    double worst = 0;
    for (std::int64_t element = 0; element < c.x.numel(); ++element) {
      const std::int64_t row = element / per_row;
      const bool mine = row >= c.start && row < c.start + c.rows;
      const std::int64_t local_index = (row - c.start) * per_row + element % per_row;
      const double numeric =
          finite_difference(c, probe_x, mine ? local_index : 0, mine, probe_x, c.weight, c.bias, world);
      if (mine)
        worst =
            std::max(worst, std::abs(dx[static_cast<std::size_t>(local_index)] - numeric) / (1 + std::abs(numeric)));
    }
    CHECK(worst <= kTolerance);

    // The parameters are replicated: perturbing one perturbs it on every rank, and the global gradient is the
    // sum of the ranks' shares.
    for (const auto& [parameter, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
      if (!parameter->defined()) continue;
      INFO(name);
      Tensor share = parameter->grad().clone();
      world.allreduce(share);
      const std::vector<double> analytic = share.to_vector();
      Tensor probe_weight = c.weight.clone(), probe_bias = c.bias.clone();
      Tensor& probe = parameter == &weight ? probe_weight : probe_bias;
      double worst_parameter = 0;
      for (std::int64_t i = 0; i < probe.numel(); ++i) {
        const double numeric = finite_difference(c, probe, i, true, narrow(c.x, 0, c.start, c.rows).clone(),
                                                 probe_weight, probe_bias, world);
        worst_parameter = std::max(worst_parameter,
                                   std::abs(analytic[static_cast<std::size_t>(i)] - numeric) / (1 + std::abs(numeric)));
      }
      CHECK(worst_parameter <= kTolerance);
    }
  }
}

TEST_CASE("sync_batch_norm_train refuses double backward with a clear error on every rank") {
  const auto world = ProcessGroup::world();
  Tensor x = randn({3, 2}, default_generator(), kF64).requires_grad_();
  const auto result = distributed::sync_batch_norm_train(x, Tensor(), Tensor(), kEps, world);
  const Tensor loss = sum(mul(result.output, result.output));
  CHECK_THROWS_WITH(loss.backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true),
                    Catch::Contains("double backward (create_graph) is not supported"));
}
