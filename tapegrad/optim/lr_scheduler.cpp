#include <tapegrad/optim/lr_scheduler.h>

// Note: no fused multiply-adds in this file. Python evaluates PyTorch's schedules with one rounding per
// operation; contracting a * b + c into one fma would change the last bit of the learning rates.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <numbers>

#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

using detail::python_float;

namespace {
// Python's floor division, which the closed forms use.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
}  // namespace

// ---- base ----
LRScheduler::LRScheduler(Optimizer& optimizer, std::string name) : optimizer_(&optimizer), name_(std::move(name)) {}

void LRScheduler::start() {
  for (ParamGroup& group : optimizer_->param_groups())
    if (!group.has("initial_lr")) group.set("initial_lr", group.lr());
  base_lrs_.clear();
  for (const ParamGroup& group : optimizer_->param_groups()) base_lrs_.push_back(group.get("initial_lr"));
  last_epoch_ = -1;
  register_state("last_epoch", &last_epoch_);
  register_state("step_count", &step_count_);
  register_state("base_lrs", &base_lrs_);
  register_state("last_lr", &last_lr_);
  step_count_ = 0;
  step();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const ParamGroup& group : optimizer_->param_groups()) lrs.push_back(group.lr());
  return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  auto& groups = optimizer_->param_groups();
  if (lrs.size() != groups.size())
    fail("{}: computed {} learning rates for {} parameter groups (groups were added after the scheduler was made?)",
         name_, lrs.size(), groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = group_lrs();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(std::int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  const auto closed = closed_form_lr();
  apply(closed ? *closed : get_lr());
}

// ---- state ----
void LRScheduler::register_state(const std::string& name, Field field) {
  for (auto& [existing, target] : fields_)
    if (existing == name) {
      target = field;
      return;
    }
  fields_.emplace_back(name, field);
}

void LRScheduler::register_child(std::shared_ptr<LRScheduler> child) { children_.push_back(std::move(child)); }

void LRScheduler::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, field] : fields_) {
    const std::string key = prefix + name;
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, double>) {
            out.emplace_back(key, scalar_tensor(*target, DType::Float64));
          } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>) {
            out.emplace_back(key, from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(*target)}, Shape{}));
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            out.emplace_back(key, from_vector(*target, Shape{static_cast<std::int64_t>(target->size())},
                                              TensorOptions{}.with_dtype(DType::Float64)));
          } else {
            out.emplace_back(key, from_vector(*target, Shape{static_cast<std::int64_t>(target->size())}));
          }
        },
        field);
  }
  for (std::size_t i = 0; i < children_.size(); ++i)
    children_[i]->collect_state(fmt::format("{}schedulers.{}.", prefix, i), out);
}

NamedTensors LRScheduler::state() const {
  NamedTensors out;
  collect_state("", out);
  return out;
}

void LRScheduler::check_state(const std::map<std::string, Tensor>& entries, const std::string& prefix,
                              std::set<std::string>& used) const {
  for (const auto& [name, field] : fields_) {
    const std::string key = prefix + name;
    const auto found = entries.find(key);
    if (found == entries.end()) fail("{}: load_state: missing entry '{}'", name_, key);
    const Tensor& t = found->second;
    used.insert(key);
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          constexpr bool is_list = std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<std::int64_t>>;
          constexpr bool is_float = std::is_same_v<T, double> || std::is_same_v<T, std::vector<double>>;
          const DType dtype = is_float ? DType::Float64 : DType::Int64;
          if (!t.defined() || t.dtype() != dtype || t.dim() != (is_list ? 1 : 0))
            fail("{}: load_state: entry '{}' must be a {} {} tensor, got {}", name_, key, is_list ? "1-d" : "0-dim",
                 dtype_name(dtype), t.defined() ? fmt::format("{} {}", shape_string(t.shape()), dtype_name(t.dtype())) : "an undefined tensor");
          if constexpr (std::is_same_v<T, std::vector<double>>) {
            // Per-group lists must match the optimizer's group count.
            if (t.numel() != static_cast<std::int64_t>(optimizer_->param_groups().size()))
              fail("{}: load_state: entry '{}' has {} values, but the optimizer has {} parameter group(s)", name_, key,
                   t.numel(), optimizer_->param_groups().size());
          }
        },
        field);
  }
  for (std::size_t i = 0; i < children_.size(); ++i)
    children_[i]->check_state(entries, fmt::format("{}schedulers.{}.", prefix, i), used);
}

void LRScheduler::apply_state(const std::map<std::string, Tensor>& entries, const std::string& prefix) {
  for (auto& [name, field] : fields_) {
    const Tensor& t = entries.at(prefix + name);
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, double>) {
            *target = t.item();
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            *target = t.data<std::int64_t>()[0];
          } else if constexpr (std::is_same_v<T, bool>) {
            *target = t.data<std::int64_t>()[0] != 0;
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            *target = t.to_vector();
          } else {
            const std::int64_t* p = t.data<std::int64_t>();
            target->assign(p, p + t.numel());
          }
        },
        field);
  }
  for (std::size_t i = 0; i < children_.size(); ++i)
    children_[i]->apply_state(entries, fmt::format("{}schedulers.{}.", prefix, i));
}

void LRScheduler::load_state(const NamedTensors& entries) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, value] : entries)
    if (!by_name.emplace(name, value).second) fail("{}: load_state: entry '{}' appears twice", name_, name);
  std::set<std::string> used;
  check_state(by_name, "", used);
  for (const auto& [name, value] : by_name)
    if (used.count(name) == 0) fail("{}: load_state: unexpected entry '{}'", name_, name);
  apply_state(by_name, "");
}

// ---- StepLR ----
StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) fail("StepLR: step_size must be positive, got {}", step_size);
  register_state("step_size", &step_size_);
  register_state("gamma", &gamma_);
  start();
}

std::vector<double> StepLR::get_lr() {
  auto lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(floor_div(last_epoch_, step_size_))));
  return lrs;
}

// ---- MultiStepLR ----
MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<std::int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  register_state("milestones", &milestones_);
  register_state("gamma", &gamma_);
  start();
}

std::vector<double> MultiStepLR::get_lr() {
  auto lrs = group_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(count));
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---- ExponentialLR ----
ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  register_state("gamma", &gamma_);
  start();
}

std::vector<double> ExponentialLR::get_lr() {
  auto lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return lrs;
}

// ---- CosineAnnealingLR ----
CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), t_max_(T_max), eta_min_(eta_min) {
  if (T_max <= 0) fail("CosineAnnealingLR: T_max must be positive, got {}", T_max);
  register_state("T_max", &t_max_);
  register_state("eta_min", &eta_min_);
  start();
}

// Note: PyTorch's recursive form, term by term in Python's evaluation order, so values agree to the last bit.
std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  const double t = static_cast<double>(last_epoch_), period = static_cast<double>(t_max_);
  auto lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (std::size_t g = 0; g < lrs.size(); ++g)
      lrs[g] = eta_min_ + (base_lrs_[g] - eta_min_) * (1 + std::cos(t * pi / period)) / 2;
    return lrs;
  }
  if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {
    for (std::size_t g = 0; g < lrs.size(); ++g)
      lrs[g] = lrs[g] + (base_lrs_[g] - eta_min_) * (1 - std::cos(pi / period)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(pi * t / period)) / (1 + std::cos(pi * (t - 1) / period)) * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) *
                                 (1 + std::cos(pi * static_cast<double>(last_epoch_) / static_cast<double>(t_max_))) / 2);
  return lrs;
}

// ---- LinearLR ----
LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, std::int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  if (!(start_factor >= 0.0 && start_factor <= 1.0))
    fail("LinearLR: Starting multiplicative factor expected to be between 0 and 1, got {}", python_float(start_factor));
  if (!(end_factor >= 0.0 && end_factor <= 1.0))
    fail("LinearLR: Ending multiplicative factor expected to be between 0 and 1, got {}", python_float(end_factor));
  if (total_iters <= 0) fail("LinearLR: total_iters must be positive, got {}", total_iters);
  // Note: the chainable form divides by total_iters * start_factor at the first step (PyTorch 1.13 raises
  // ZeroDivisionError there; later versions refuse 0 at construction). Computed here, it made the lr NaN.
  if (start_factor == 0.0)
    fail("LinearLR: Starting multiplicative factor expected to be greater than 0 and less or equal to 1, got 0 (the "
         "first step would divide by zero)");
  register_state("start_factor", &start_factor_);
  register_state("end_factor", &end_factor_);
  register_state("total_iters", &total_iters_);
  start();
}

std::vector<double> LinearLR::get_lr() {
  auto lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr = lr * (1. + delta / (static_cast<double>(total_iters_) * start_factor_ +
                             static_cast<double>(last_epoch_ - 1) * delta));
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

// ---- SequentialLR ----
SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<std::int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty()) fail("SequentialLR: expects at least one scheduler");
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    if (!schedulers_[i]) fail("SequentialLR: scheduler {} is null", i);
    if (&schedulers_[i]->optimizer() != &optimizer)
      fail("SequentialLR: Sequential Schedulers expects all schedulers to belong to the same optimizer, but got "
           "schedulers at index {} to be different than the optimizer passed in.",
           i);
  }
  if (milestones_.size() != schedulers_.size() - 1)
    fail("SequentialLR: Sequential Schedulers expects number of schedulers provided to be one more than the number "
         "of milestone points, but got number of schedulers {} and the number of milestones to be equal to {}",
         schedulers_.size(), milestones_.size());
  // Note: PyTorch's start-up: rewind every group to its initial lr and every child by one epoch, then replay
  // the first scheduler's initial step.
  last_epoch_ = 0;
  for (ParamGroup& group : optimizer.param_groups()) group.set_lr(group.get("initial_lr"));
  for (auto& scheduler : schedulers_) scheduler->last_epoch_ -= 1;
  schedulers_[0]->step_count_ = 0;
  schedulers_[0]->step();
  last_lr_ = schedulers_[0]->get_last_lr();
  register_state("last_epoch", &last_epoch_);
  register_state("milestones", &milestones_);
  register_state("last_lr", &last_lr_);
  for (auto& scheduler : schedulers_) register_child(scheduler);
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto index = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& scheduler = *schedulers_[static_cast<std::size_t>(index)];
  if (index > 0 && milestones_[static_cast<std::size_t>(index) - 1] == last_epoch_)
    scheduler.step_to(0);
  else
    scheduler.step();
  last_lr_ = scheduler.get_last_lr();
}

// ---- ChainedScheduler ----
namespace {
Optimizer& first_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& schedulers) {
  if (schedulers.empty() || !schedulers[0]) fail("ChainedScheduler: expects at least one (non-null) scheduler");
  return schedulers[0]->optimizer();
}
}  // namespace

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(first_optimizer(schedulers), "ChainedScheduler"),
      schedulers_(std::move(schedulers)) {
  for (std::size_t i = 1; i < schedulers_.size(); ++i)
    if (!schedulers_[i] || &schedulers_[i]->optimizer() != optimizer_)
      fail("ChainedScheduler: ChainedScheduler expects all schedulers to belong to the same optimizer, but got "
           "schedulers at index 0 and {} to be different",
           i);
  last_epoch_ = 0;  // counts this scheduler's steps; PyTorch's ChainedScheduler keeps no epoch of its own
  last_lr_ = group_lrs();
  register_state("last_epoch", &last_epoch_);
  register_state("last_lr", &last_lr_);
  for (auto& scheduler : schedulers_) register_child(scheduler);
}

void ChainedScheduler::step() {
  for (auto& scheduler : schedulers_) scheduler->step();
  ++last_epoch_;
  last_lr_ = group_lrs();
}

}  // namespace tapegrad::optim
