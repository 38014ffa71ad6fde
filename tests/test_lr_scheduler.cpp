// Learning-rate schedules: PyTorch's values, chaining, state save/load, errors.
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "support/optim_reference.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::optim;
using tapegrad::testing::identical;
using tapegrad::testing::reference_values;

namespace {

// The script's optimizers: two groups (lr 0.1 from the defaults, 0.05 overridden), one scalar parameter each.
struct Setup {
  Tensor a = zeros({1}, TensorOptions{}.with_requires_grad());
  Tensor b = zeros({1}, TensorOptions{}.with_requires_grad());
  std::unique_ptr<Optimizer> optimizer;
};

std::unique_ptr<Setup> sgd(double momentum = 0.0) {
  auto s = std::make_unique<Setup>();
  s->optimizer = std::make_unique<SGD>(std::vector<ParamGroup>{{{s->a}, {}}, {{s->b}, {{"lr", 0.05}}}},
                                       SGDOptions{.lr = 0.1, .momentum = momentum});
  return s;
}

std::unique_ptr<Setup> adam() {
  auto s = std::make_unique<Setup>();
  s->optimizer =
      std::make_unique<Adam>(std::vector<ParamGroup>{{{s->a}, {}}, {{s->b}, {{"lr", 0.05}}}}, AdamOptions{.lr = 0.1});
  return s;
}

using Make = std::function<std::shared_ptr<LRScheduler>(Optimizer&)>;

struct Case {
  std::string name;
  std::function<std::unique_ptr<Setup>()> setup;
  Make make;
  int steps;
  std::string momentum_key;  // "" when the schedule does not cycle momentum
};

// The schedules of make_optim_reference.py, by the same names and options.
std::vector<Case> cases() {
  return {
      {"step_lr", [] { return sgd(); }, [](Optimizer& o) { return std::make_shared<StepLR>(o, 3, 0.5); }, 10, ""},
      {"multistep_lr", [] { return sgd(); },
       [](Optimizer& o) { return std::make_shared<MultiStepLR>(o, std::vector<std::int64_t>{2, 5, 5, 8}, 0.1); }, 10, ""},
      {"exponential_lr", [] { return sgd(); }, [](Optimizer& o) { return std::make_shared<ExponentialLR>(o, 0.9); }, 10, ""},
      {"cosine_lr", [] { return sgd(); }, [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 10, 0.001); },
       25, ""},
      {"linear_lr", [] { return sgd(); }, [](Optimizer& o) { return std::make_shared<LinearLR>(o, 0.25, 1.0, 4); }, 8, ""},
      {"one_cycle", [] { return sgd(0.9); },
       [](Optimizer& o) {
         return std::make_shared<OneCycleLR>(o, std::vector<double>{1.0, 0.5},
                                             OneCycleOptions{.total_steps = 20, .pct_start = 0.3});
       },
       19, "momentum"},
      {"one_cycle_three_phase_linear", [] { return adam(); },
       [](Optimizer& o) {
         return std::make_shared<OneCycleLR>(
             o, 0.4,
             OneCycleOptions{.total_steps = 15, .pct_start = 0.25, .anneal_strategy = AnnealStrategy::Linear,
                             .div_factor = 10.0, .final_div_factor = 100.0, .three_phase = true});
       },
       15, "beta1"},
      {"sequential_warmup_cosine", [] { return sgd(); },
       [](Optimizer& o) {
         return std::make_shared<SequentialLR>(
             o,
             std::vector<std::shared_ptr<LRScheduler>>{std::make_shared<LinearLR>(o, 0.1, 1.0, 3),
                                                       std::make_shared<CosineAnnealingLR>(o, 6)},
             std::vector<std::int64_t>{3});
       },
       12, ""},
      {"chained_linear_exponential", [] { return sgd(); },
       [](Optimizer& o) {
         return std::make_shared<ChainedScheduler>(std::vector<std::shared_ptr<LRScheduler>>{
             std::make_shared<LinearLR>(o, 0.5, 1.0, 4), std::make_shared<ExponentialLR>(o, 0.9)});
       },
       8, ""},
  };
}

void append_lrs(std::vector<double>& out, const LRScheduler& scheduler) {
  for (double lr : scheduler.get_last_lr()) out.push_back(lr);
}

}  // namespace

// Note: the schedules are evaluated in Python's order with one rounding per operation (lr_scheduler.cpp
// turns off fma contraction), so they equal PyTorch's values bit for bit.
TEST_CASE("every schedule gives PyTorch's learning rates (and momenta) to the last bit") {
  for (const Case& c : cases()) {
    DYNAMIC_SECTION(c.name) {
      auto setup = c.setup();
      auto scheduler = c.make(*setup->optimizer);
      std::vector<double> lrs, momenta;
      const auto record = [&] {
        append_lrs(lrs, *scheduler);
        const auto& groups = setup->optimizer->param_groups();
        for (std::size_t g = 0; g < groups.size(); ++g) {
          CHECK(groups[g].lr() == scheduler->get_last_lr()[g]);  // the lr is written into the group
          if (!c.momentum_key.empty()) momenta.push_back(groups[g].get(c.momentum_key));
        }
      };
      record();
      for (int step = 0; step < c.steps; ++step) {
        setup->optimizer->step();
        scheduler->step();
        record();
      }
      CHECK(lrs == reference_values(c.name + "/lr"));
      if (!c.momentum_key.empty()) CHECK(momenta == reference_values(c.name + "/momentum"));
    }
  }
}

TEST_CASE("CosineAnnealingLR's recursive form equals the closed form over T_max steps") {
  auto setup = sgd();
  CosineAnnealingLR cosine(*setup->optimizer, 7, 0.002);
  for (int t = 1; t <= 7; ++t) {
    cosine.step();
    for (std::size_t g = 0; g < 2; ++g) {
      const double base = g == 0 ? 0.1 : 0.05;
      const double closed = 0.002 + (base - 0.002) * (1 + std::cos(M_PI * t / 7)) / 2;
      CHECK(cosine.get_last_lr()[g] == Approx(closed).epsilon(1e-14));
    }
  }
  CHECK(cosine.get_last_lr()[0] == Approx(0.002).epsilon(1e-14));
}

TEST_CASE("a scheduler's state restores the schedule exactly in a fresh optimizer and scheduler") {
  for (const Case& c : cases()) {
    DYNAMIC_SECTION(c.name) {
      auto original = c.setup();
      auto scheduler = c.make(*original->optimizer);
      const int split = c.steps / 2;
      for (int step = 0; step < split; ++step) scheduler->step();
      const NamedTensors optimizer_state = original->optimizer->state();
      const NamedTensors scheduler_state = scheduler->state();

      auto fresh = c.setup();
      auto resumed = c.make(*fresh->optimizer);  // construction takes step 0 and writes lrs...
      fresh->optimizer->load_state(optimizer_state);  // ...which the checkpoint overwrites
      resumed->load_state(scheduler_state);
      CHECK(resumed->get_last_lr() == scheduler->get_last_lr());
      CHECK(resumed->last_epoch() == scheduler->last_epoch());
      for (int step = split; step < c.steps; ++step) {
        scheduler->step();
        resumed->step();
        CHECK(resumed->get_last_lr() == scheduler->get_last_lr());
        for (std::size_t g = 0; g < 2; ++g)
          CHECK(fresh->optimizer->param_groups()[g].options == original->optimizer->param_groups()[g].options);
      }
    }
  }
}

TEST_CASE("scheduler state names and kinds") {
  auto setup = sgd();
  SequentialLR sequential(*setup->optimizer,
                          {std::make_shared<LinearLR>(*setup->optimizer, 0.1, 1.0, 3),
                           std::make_shared<StepLR>(*setup->optimizer, 2)},
                          {3});
  std::map<std::string, Tensor> state;
  for (const auto& [name, value] : sequential.state()) state[name] = value;
  CHECK(state.at("last_epoch").dtype() == DType::Int64);
  CHECK(state.at("milestones").to_vector() == std::vector<double>{3});
  CHECK(state.at("schedulers.0.start_factor").item() == 0.1);
  CHECK(state.at("schedulers.1.step_size").item() == 2);
  CHECK(state.at("schedulers.1.base_lrs").to_vector() == std::vector<double>{0.1, 0.05});
  CHECK(state.at("schedulers.1.gamma").dtype() == DType::Float64);
  // The groups remember where the schedule started, as PyTorch's "initial_lr".
  CHECK(setup->optimizer->param_groups()[1].get("initial_lr") == 0.05);
}

TEST_CASE("a bad scheduler state is refused and changes nothing") {
  auto setup = sgd();
  StepLR scheduler(*setup->optimizer, 3, 0.5);
  for (int i = 0; i < 4; ++i) scheduler.step();
  const NamedTensors good = scheduler.state();
  const auto edited = [&](const std::string& key, const Tensor& value) {
    NamedTensors out;
    for (const auto& [name, t] : good)
      if (name != key) out.emplace_back(name, t);
    if (value.defined()) out.emplace_back(key, value);
    return out;
  };
  NamedTensors extra = good;
  extra.emplace_back("momentum", scalar_tensor(0.9, DType::Float64));
  const std::vector<std::pair<NamedTensors, std::string>> bad = {
      {edited("gamma", Tensor()), "StepLR: load_state: missing entry 'gamma'"},
      {edited("last_epoch", scalar_tensor(2.0, DType::Float64)),
       "StepLR: load_state: entry 'last_epoch' must be a 0-dim int64 tensor, got [] float64"},
      {edited("base_lrs", from_vector(std::vector<double>{0.1, 0.2, 0.3}, {3}, TensorOptions{}.with_dtype(DType::Float64))),
       "StepLR: load_state: entry 'base_lrs' has 3 values, but the optimizer has 2 parameter group(s)"},
      {extra, "StepLR: load_state: unexpected entry 'momentum'"},
  };
  for (const auto& [entries, message] : bad) {
    CHECK_THROWS_WITH(scheduler.load_state(entries), message);
    const NamedTensors now = scheduler.state();
    REQUIRE(now.size() == good.size());
    for (std::size_t i = 0; i < now.size(); ++i) CHECK(identical(now[i].second, good[i].second));
  }
}

namespace {
// A minimal optimizer without momentum: shows the base class is all a new optimizer needs.
class SignDescent : public Optimizer {
 public:
  explicit SignDescent(std::vector<Tensor> params) : Optimizer("SignDescent", {{"lr", 0.1}}) {
    add_param_group({std::move(params), {}});
  }

 protected:
  void update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState&) override {
    double* p = param.data<double>();
    const double* g = grad.data<double>();
    for (std::int64_t i = 0; i < param.numel(); ++i) p[i] -= group.lr() * ((g[i] > 0) - (g[i] < 0));
  }
  void validate(const Options& options) const override {
    if (!(options.at("lr") >= 0)) fail("SignDescent: Invalid learning rate: {}", options.at("lr"));
  }
  std::vector<std::string> required_state_keys() const override { return {}; }
};
}  // namespace

TEST_CASE("bad schedule options give clear errors") {
  auto setup = sgd();
  Optimizer& o = *setup->optimizer;
  CHECK_THROWS_WITH(LinearLR(o, 1.5), "LinearLR: Starting multiplicative factor expected to be between 0 and 1, got 1.5");
  CHECK_THROWS_WITH(LinearLR(o, 0.5, -1.0), "LinearLR: Ending multiplicative factor expected to be between 0 and 1, got -1.0");
  CHECK_THROWS_WITH(StepLR(o, 0), "StepLR: step_size must be positive, got 0");
  CHECK_THROWS_WITH(CosineAnnealingLR(o, 0), "CosineAnnealingLR: T_max must be positive, got 0");
  CHECK_THROWS_WITH(OneCycleLR(o, 1.0, OneCycleOptions{}),
                    "OneCycleLR: You must define either total_steps OR (epochs AND steps_per_epoch)");
  CHECK_THROWS_WITH(OneCycleLR(o, 1.0, OneCycleOptions{.total_steps = -3}),
                    "OneCycleLR: Expected positive integer total_steps, but got -3");
  CHECK_THROWS_WITH(OneCycleLR(o, 1.0, OneCycleOptions{.total_steps = 10, .pct_start = 1.5}),
                    "OneCycleLR: Expected float between 0 and 1 pct_start, but got 1.5");
  CHECK_THROWS_WITH(OneCycleLR(o, std::vector<double>{1.0}, OneCycleOptions{.total_steps = 10}),
                    "OneCycleLR: expected 2 values for max_lr, got 1");
  SignDescent sign({zeros({2}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad())});
  CHECK_THROWS_WITH(OneCycleLR(sign, 1.0, OneCycleOptions{.total_steps = 10}),
                    "OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled");
  OneCycleLR one_cycle(sign, 1.0, OneCycleOptions{.epochs = 2, .steps_per_epoch = 2, .cycle_momentum = false});
  for (int i = 0; i < 4; ++i) one_cycle.step();
  CHECK_THROWS_WITH(one_cycle.step(), "OneCycleLR: Tried to step 6 times. The specified number of total steps is 4");

  auto other = sgd();
  auto step = std::make_shared<StepLR>(o, 2);
  auto foreign = std::make_shared<StepLR>(*other->optimizer, 2);
  CHECK_THROWS_WITH(SequentialLR(o, {step, foreign}, {2}),
                    "SequentialLR: Sequential Schedulers expects all schedulers to belong to the same optimizer, but "
                    "got schedulers at index 1 to be different than the optimizer passed in.");
  CHECK_THROWS_WITH(SequentialLR(o, {step}, {2}),
                    "SequentialLR: Sequential Schedulers expects number of schedulers provided to be one more than the "
                    "number of milestone points, but got number of schedulers 1 and the number of milestones to be "
                    "equal to 1");
  CHECK_THROWS_WITH(ChainedScheduler({step, foreign}),
                    "ChainedScheduler: ChainedScheduler expects all schedulers to belong to the same optimizer, but got "
                    "schedulers at index 0 and 1 to be different");
}

TEST_CASE("a warm-up schedule drives a real optimizer's steps") {
  Tensor p = zeros({1}, TensorOptions{}.with_dtype(DType::Float64).with_requires_grad());
  SGD sgd_optimizer({p}, SGDOptions{.lr = 1.0});
  LinearLR warmup(sgd_optimizer, 0.25, 1.0, 3);
  std::vector<double> moves;
  for (int i = 0; i < 5; ++i) {
    const double before = p.item();
    p.set_grad(ones({1}, TensorOptions{}.with_dtype(DType::Float64)));
    sgd_optimizer.step();
    warmup.step();
    moves.push_back(before - p.item());
  }
  CHECK(moves == std::vector<double>{0.25, 0.5, 0.75, 1.0, 1.0});
}
