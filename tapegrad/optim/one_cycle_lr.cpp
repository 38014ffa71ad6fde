#include <tapegrad/optim/one_cycle_lr.h>

// Note: no fused multiply-adds in this file. Python evaluates PyTorch's schedules with one rounding per
// operation; contracting a * b + c into one fma would change the last bit of the learning rates.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <numbers>

#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

namespace {

struct Phase {
  double end_step;
  const char *start_lr, *end_lr, *start_momentum, *end_momentum;
};

std::vector<Phase> phases(std::int64_t total_steps, double pct_start, bool three_phase) {
  const double total = static_cast<double>(total_steps);
  if (three_phase)
    return {{pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
            {2 * pct_start * total - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
            {total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  return {{pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
          {total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
}

double anneal(bool linear, double start, double end, double pct) {
  if (linear) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::int64_t resolve_total_steps(const OneCycleOptions& o) {
  if (o.total_steps == 0 && o.epochs == 0 && o.steps_per_epoch == 0)
    fail("OneCycleLR: You must define either total_steps OR (epochs AND steps_per_epoch)");
  if (o.total_steps != 0) {
    if (o.total_steps <= 0) fail("OneCycleLR: Expected positive integer total_steps, but got {}", o.total_steps);
    return o.total_steps;
  }
  if (o.epochs <= 0) fail("OneCycleLR: Expected positive integer epochs, but got {}", o.epochs);
  if (o.steps_per_epoch <= 0) fail("OneCycleLR: Expected positive integer steps_per_epoch, but got {}", o.steps_per_epoch);
  return o.epochs * o.steps_per_epoch;
}

std::vector<double> repeat(const Optimizer& optimizer, double value) {
  return std::vector<double>(optimizer.param_groups().size(), value);
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleOptions options)
    : OneCycleLR(optimizer, repeat(optimizer, max_lr), options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleOptions o)
    : LRScheduler(optimizer, "OneCycleLR"),
      total_steps_(resolve_total_steps(o)),
      pct_start_(o.pct_start),
      anneal_linear_(o.anneal_strategy == AnnealStrategy::Linear ? 1 : 0),
      cycle_momentum_(o.cycle_momentum),
      three_phase_(o.three_phase) {
  if (!(o.pct_start >= 0.0 && o.pct_start <= 1.0))
    fail("OneCycleLR: Expected float between 0 and 1 pct_start, but got {}", detail::python_float(o.pct_start));
  auto& groups = optimizer.param_groups();
  if (max_lrs.size() != groups.size())
    fail("OneCycleLR: expected {} values for max_lr, got {}", groups.size(), max_lrs.size());
  if (cycle_momentum_) {
    const bool has_momentum = optimizer.defaults().count("momentum") != 0;
    use_beta1_ = optimizer.defaults().count("beta1") != 0;
    if (!has_momentum && !use_beta1_)
      fail("OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled");
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].set("initial_lr", max_lrs[g] / o.div_factor);
    groups[g].set("max_lr", max_lrs[g]);
    groups[g].set("min_lr", groups[g].get("initial_lr") / o.final_div_factor);
    if (cycle_momentum_) {
      groups[g].set(use_beta1_ ? "beta1" : "momentum", o.max_momentum);
      groups[g].set("max_momentum", o.max_momentum);
      groups[g].set("base_momentum", o.base_momentum);
    }
  }
  register_state("total_steps", &total_steps_);
  register_state("pct_start", &pct_start_);
  register_state("anneal_linear", &anneal_linear_);
  register_state("cycle_momentum", &cycle_momentum_);
  register_state("three_phase", &three_phase_);
  register_state("use_beta1", &use_beta1_);
  start();
}

std::vector<double> OneCycleLR::get_lr() {
  const std::int64_t step_num = last_epoch_;
  if (step_num > total_steps_)
    fail("OneCycleLR: Tried to step {} times. The specified number of total steps is {}", step_num + 1, total_steps_);
  const auto schedule = phases(total_steps_, pct_start_, three_phase_);
  const bool linear = anneal_linear_ != 0;
  std::vector<double> lrs;
  for (ParamGroup& group : optimizer_->param_groups()) {
    double start_step = 0, lr = 0, momentum = 0;
    for (std::size_t i = 0; i < schedule.size(); ++i) {
      const Phase& phase = schedule[i];
      if (static_cast<double>(step_num) <= phase.end_step || i + 1 == schedule.size()) {
        const double pct = (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step);
        lr = anneal(linear, group.get(phase.start_lr), group.get(phase.end_lr), pct);
        if (cycle_momentum_)
          momentum = anneal(linear, group.get(phase.start_momentum), group.get(phase.end_momentum), pct);
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
    if (cycle_momentum_) group.set(use_beta1_ ? "beta1" : "momentum", momentum);
  }
  return lrs;
}

}  // namespace tapegrad::optim
