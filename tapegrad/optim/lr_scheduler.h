#pragma once
/// Learning-rate schedules with PyTorch's chainable formulas: StepLR, MultiStepLR, ExponentialLR,
/// CosineAnnealingLR, LinearLR (warm-up), and SequentialLR / ChainedScheduler to combine them.
#include <tapegrad/export.h>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <tapegrad/optim/optimizer.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// Note: as in PyTorch, a scheduler writes the new lr into every parameter group, and most schedules are
/// "chainable": the next lr is computed from the group's current lr, so two schedulers stepping the same
/// optimizer multiply their effects (ChainedScheduler). Construction performs the first step (epoch 0), and
/// records each group's starting lr as the group hyperparameter "initial_lr" (kept if already there, so a
/// second scheduler on the same optimizer starts from the same base). Call step() after optimizer.step().
/// A scheduler keeps a reference to its optimizer, which must outlive it. Schedulers are not copyable.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one epoch (or iteration) and writes the new learning rates into the groups.
  virtual void step();
  /// The learning rates of the last step, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// Number of steps taken since construction (0 right after construction).
  std::int64_t last_epoch() const { return last_epoch_; }
  /// "StepLR", "CosineAnnealingLR", ...
  const std::string& name() const { return name_; }
  Optimizer& optimizer() const { return *optimizer_; }

  /// Counters and hyperparameters by name ("last_epoch", "base_lrs", "gamma"; "schedulers.0.last_epoch" for
  /// combined schedules). Counters are int64, values float64; scalars 0-dim, lists 1-d.
  NamedTensors state() const;
  /// Restores a state() of the same kind of scheduler over as many groups. Everything is checked first (names,
  /// dtypes, shapes), so a failed load leaves the scheduler unchanged. Group lrs live in the optimizer's state.
  void load_state(const NamedTensors& entries);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  /// What ordinary schedules call last in their constructor: sets "initial_lr", base lrs and takes step 0.
  void start();
  /// The chainable lr of each group for the current last_epoch (called within step()).
  virtual std::vector<double> get_lr() = 0;
  /// The closed form for the current last_epoch, for schedules that have one (SequentialLR uses it).
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  /// The groups' current learning rates.
  std::vector<double> group_lrs() const;

  /// Registers a member as part of state() (pointers stay valid: schedulers do not move).
  using Field = std::variant<double*, std::int64_t*, bool*, std::vector<double>*, std::vector<std::int64_t>*>;
  void register_state(const std::string& name, Field field);
  /// Registers a child scheduler's state under "schedulers.<i>.".
  void register_child(std::shared_ptr<LRScheduler> child);

  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  std::int64_t last_epoch_ = -1;
  std::int64_t step_count_ = 0;
  std::vector<double> last_lr_;

 private:
  friend class SequentialLR;
  /// PyTorch's deprecated step(epoch): jumps to `epoch`, using the closed form when there is one.
  void step_to(std::int64_t epoch);
  void apply(const std::vector<double>& lrs);
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  void check_state(const std::map<std::string, Tensor>& entries, const std::string& prefix,
                   std::set<std::string>& used) const;
  void apply_state(const std::map<std::string, Tensor>& entries, const std::string& prefix);

  std::string name_;
  std::vector<std::pair<std::string, Field>> fields_;
  std::vector<std::shared_ptr<LRScheduler>> children_;
};

/// lr *= gamma every `step_size` epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

/// lr *= gamma at each milestone epoch (a milestone listed twice multiplies by gamma^2).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<std::int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<std::int64_t> milestones_;  // sorted, duplicates kept
  double gamma_;
};

/// lr *= gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

/// Cosine from the base lr down to eta_min over T_max epochs, then back up (period 2 T_max), with PyTorch's
/// recursive formula (the same values as eta_min + (base - eta_min)(1 + cos(pi t / T_max)) / 2 when alone).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up: the lr factor goes from start_factor to end_factor over total_iters epochs, then stays.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, std::int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  std::int64_t total_iters_;
};

/// Runs schedulers one after another: schedulers[i + 1] takes over at epoch milestones[i] (restarted at its epoch 0).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<std::int64_t> milestones);
  void step() override;

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<std::int64_t> milestones_;
};

/// Steps every scheduler on each step(), so their chainable factors multiply (warm-up times decay).
class ChainedScheduler : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step() override;

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace tapegrad::optim

TAPEGRAD_API_END
