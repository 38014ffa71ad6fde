#pragma once
/// OneCycleLR: Smith's one-cycle policy (warm up to max_lr, anneal far below the start), PyTorch's formulas.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/optim/lr_scheduler.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// How OneCycleLR moves between two values within a phase.
enum class AnnealStrategy { Cos, Linear };

/// OneCycleLR's options, PyTorch's defaults. Give total_steps, or epochs and steps_per_epoch.
struct OneCycleOptions {
  std::int64_t total_steps = 0;
  std::int64_t epochs = 0;
  std::int64_t steps_per_epoch = 0;
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

/// Note: the lr starts at max_lr / div_factor ("initial_lr"), rises to max_lr over pct_start of the steps, then
/// falls to initial_lr / final_div_factor ("min_lr") at step total_steps - 1 (three_phase: back to initial_lr
/// first, then down to min_lr). With cycle_momentum the group's momentum (SGD, RMSprop) or beta1 (Adam) moves
/// the opposite way between max_momentum and base_momentum. It is stepped once per batch, not per epoch, and
/// writes "initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum" into every group, as PyTorch does.
class OneCycleLR : public LRScheduler {
 public:
  /// One max_lr for every group.
  OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleOptions options);
  /// One max_lr per group.
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleOptions options);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::int64_t total_steps_;
  double pct_start_;
  std::int64_t anneal_linear_;  // AnnealStrategy::Linear as 1, so it is part of state()
  bool cycle_momentum_;
  bool three_phase_;
  bool use_beta1_ = false;
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
