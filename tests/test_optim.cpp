// Optimizers: PyTorch reference trajectories, parameters vs buffers, state save/load and convergence.
// (Hyperparameter errors, groups and gradient clipping are test_optim_options.cpp.)
#include <cmath>
#include <map>
#include <memory>

#include "support/optim_problem.h"
#include "support/optim_reference.h"
#include "support/properties.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::optim;
using tapegrad::testing::close_to;
using tapegrad::testing::identical;
using tapegrad::testing::initial_params;
using tapegrad::testing::reference_values;
using tapegrad::testing::set_reference_grads;

namespace {

TensorOptions f64_grad() { return TensorOptions{}.with_dtype(DType::Float64).with_requires_grad(); }

// The optimizer cases of make_optim_reference.py, by the same names and hyperparameters.
std::unique_ptr<Optimizer> make_case(const std::string& name, const std::vector<Tensor>& p) {
  if (name == "sgd") return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1});
  if (name == "sgd_weight_decay") return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .weight_decay = 0.1});
  if (name == "sgd_momentum") return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9});
  if (name == "sgd_momentum_dampening")
    return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.05});
  if (name == "sgd_nesterov")
    return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  if (name == "sgd_maximize") return std::make_unique<SGD>(p, SGDOptions{.lr = 0.02, .momentum = 0.5, .maximize = true});
  if (name == "adam") return std::make_unique<Adam>(p, AdamOptions{.lr = 0.05});
  if (name == "adam_weight_decay") return std::make_unique<Adam>(p, AdamOptions{.lr = 0.05, .weight_decay = 0.1});
  if (name == "adam_amsgrad")
    return std::make_unique<Adam>(p, AdamOptions{.lr = 0.05, .betas = {0.8, 0.9}, .weight_decay = 0.02, .amsgrad = true});
  if (name == "adam_maximize") return std::make_unique<Adam>(p, AdamOptions{.lr = 0.02, .eps = 1e-6, .maximize = true});
  if (name == "adamw") return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
  if (name == "adamw_amsgrad") return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.05, .betas = {0.7, 0.95}, .amsgrad = true});
  if (name == "rmsprop") return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01});
  if (name == "rmsprop_momentum") return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01, .alpha = 0.9, .momentum = 0.9});
  if (name == "rmsprop_centered_momentum")
    return std::make_unique<RMSprop>(
        p, RMSpropOptions{.lr = 0.01, .eps = 1e-6, .weight_decay = 0.1, .momentum = 0.8, .centered = true});
  if (name == "rmsprop_centered_maximize")
    return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.005, .centered = true, .maximize = true});
  if (name == "sgd_groups")
    return std::make_unique<SGD>(
        std::vector<ParamGroup>{{{p[0]}, {}}, {{p[1]}, {{"lr", 0.01}, {"weight_decay", 0.1}}}},
        SGDOptions{.lr = 0.1, .momentum = 0.9});
  if (name == "adam_groups")
    return std::make_unique<Adam>(std::vector<ParamGroup>{{{p[0]}, {{"weight_decay", 0.0}}}, {{p[1]}, {{"lr", 0.02}}}},
                                  AdamOptions{.lr = 0.05, .weight_decay = 0.1});
  FAIL("unknown case " << name);
  return nullptr;
}

const std::vector<std::string> all_cases = {
    "sgd", "sgd_weight_decay", "sgd_momentum", "sgd_momentum_dampening", "sgd_nesterov", "sgd_maximize",
    "adam", "adam_weight_decay", "adam_amsgrad", "adam_maximize", "adamw", "adamw_amsgrad",
    "rmsprop", "rmsprop_momentum", "rmsprop_centered_momentum", "rmsprop_centered_maximize",
    "sgd_groups", "adam_groups"};

// A layer with one parameter and one buffer, as BatchNorm has.
class ScaleWithStats : public nn::Module {
 public:
  ScaleWithStats() : Module("ScaleWithStats") {
    weight = register_parameter("weight", tensor({1.0, -2.0, 0.5}, {3}, TensorOptions{}.with_dtype(DType::Float64)));
    running = register_buffer("running", tensor({3.0, 4.0, 5.0}, {3}, TensorOptions{}.with_dtype(DType::Float64)));
  }
  Tensor forward(const Tensor& x) override {
    // Note: training-mode forward updates the buffer off the tape, as BatchNorm's running statistics.
    {
      NoGradGuard no_grad;
      running.mul_(0.9).add_(x.detach(), 0.1);
    }
    return x * weight;
  }
  Tensor weight, running;
};

std::vector<double> values_of(const std::vector<Tensor>& params) {
  std::vector<double> out;
  for (const Tensor& p : params)
    for (double v : p.to_vector()) out.push_back(v);
  return out;
}

}  // namespace

// ---- PyTorch reference trajectories ----
TEST_CASE("every optimizer follows PyTorch's float64 trajectory") {
  for (const std::string& name : all_cases) {
    DYNAMIC_SECTION(name) {
      std::vector<Tensor> params = initial_params();
      auto optimizer = make_case(name, params);
      for (int step = 1; step <= 6; ++step) {
        set_reference_grads(params);
        optimizer->step();
        for (std::size_t i = 0; i < params.size(); ++i) {
          INFO("step " << step << ", param " << i);
          CHECK(close_to(params[i].to_vector(), reference_values(fmt::format("{}/s{}/param{}", name, step, i))));
        }
      }
    }
  }
}

TEST_CASE("float32 parameters take the same steps to float32 precision") {
  for (const std::string name : {"sgd_nesterov", "adam_amsgrad", "adamw", "rmsprop_centered_momentum"}) {
    DYNAMIC_SECTION(name) {
      std::vector<Tensor> params = initial_params(DType::Float32);
      auto optimizer = make_case(name, params);
      for (int step = 1; step <= 6; ++step) {
        set_reference_grads(params);
        optimizer->step();
      }
      for (std::size_t i = 0; i < params.size(); ++i) {
        CHECK(params[i].dtype() == DType::Float32);
        CHECK(close_to(params[i].to_vector(), reference_values(fmt::format("{}/s6/param{}", name, i)), 1e-5));
      }
    }
  }
}

// ---- parameters, buffers, grads ----
TEST_CASE("an optimizer step never changes a buffer") {
  ScaleWithStats layer;
  layer.train();
  Adam adam(layer.parameters(), AdamOptions{.lr = 0.1, .weight_decay = 0.1});
  SGD sgd(layer.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, TensorOptions{}.with_dtype(DType::Float64));
  sum(layer(x) * layer(x)).backward();
  const Tensor running_before = layer.running.clone();
  const std::uint64_t version_before = layer.running.version();
  const Tensor weight_before = layer.weight.clone();
  adam.step();
  sgd.step();
  CHECK(identical(layer.running, running_before));
  CHECK(layer.running.version() == version_before);
  CHECK_FALSE(identical(layer.weight, weight_before));
  for (const auto& [name, value] : adam.state()) CHECK(name.find("running") == std::string::npos);
}

TEST_CASE("an optimizer refuses a buffer in its parameter list") {
  ScaleWithStats layer;
  CHECK_THROWS_WITH(SGD(layer.buffers(), SGDOptions{.lr = 0.1}),
                    "SGD: parameter 0 of group 0 (shape [3]) is a module buffer; optimizers only see parameters");
}

TEST_CASE("a parameter without a grad is untouched and gets no state") {
  for (const std::string& name : all_cases) {
    DYNAMIC_SECTION(name) {
      std::vector<Tensor> params = initial_params();
      auto optimizer = make_case(name, params);
      set_reference_grads(params);
      params[1].set_grad(Tensor());
      const Tensor before = params[1].clone();
      const std::uint64_t version = params[1].version();
      optimizer->step();
      optimizer->step();
      CHECK(identical(params[1], before));
      CHECK(params[1].version() == version);
      for (const auto& [key, value] : optimizer->state()) {
        const bool second = key.find("group0.param1.") == 0 || key.find("group1.param0.") == 0;
        CHECK_FALSE(second);
      }
    }
  }
}

TEST_CASE("SGD with lr 0 changes nothing, whatever the other options") {
  rc::prop("lr 0 is the identity", [] {
    const Tensor start = *gen::tensor(3, 4);
    const Tensor grad = *gen::tensor_of_shape(start.shape());
    const bool nesterov = *rc::gen::arbitrary<bool>();
    const double momentum = *rc::gen::inRange(1, 10) / 10.0;
    const double weight_decay = *rc::gen::inRange(0, 10) / 10.0;
    Tensor p = start.clone().requires_grad_();
    SGD sgd({p}, SGDOptions{.lr = 0.0, .momentum = momentum, .weight_decay = weight_decay, .nesterov = nesterov});
    for (int i = 0; i < 3; ++i) {
      p.set_grad(grad.clone());
      sgd.step();
    }
    RC_ASSERT(p.to_vector() == start.to_vector());
  });
}

TEST_CASE("setting a group's lr between steps takes effect") {
  std::vector<Tensor> params = initial_params();
  SGD sgd(params, SGDOptions{.lr = 0.1});
  sgd.param_groups()[0].set_lr(0.0);
  set_reference_grads(params);
  const auto before = values_of(params);
  sgd.step();
  CHECK(values_of(params) == before);
  sgd.param_groups()[0].set_lr(-1.0);
  CHECK_THROWS_WITH(sgd.step(), "SGD: Invalid learning rate: -1.0 (parameter group 0)");
  CHECK(values_of(params) == before);
}

TEST_CASE("optimizer steps are not recorded on the tape") {
  std::vector<Tensor> params = initial_params();
  Adam adam(params);
  set_reference_grads(params);
  const std::size_t before = tape_size();
  adam.step();
  CHECK(tape_size() == before);
  CHECK(params[0].requires_grad());
  CHECK(params[0].is_leaf());
}

TEST_CASE("zero_grad clears or zeroes every grad") {
  std::vector<Tensor> params = initial_params();
  SGD sgd(params, SGDOptions{.lr = 0.1});
  set_reference_grads(params);
  sgd.zero_grad(/*set_to_none=*/false);
  CHECK(params[0].grad().to_vector() == std::vector<double>(6, 0.0));
  sgd.zero_grad();
  CHECK_FALSE(params[0].grad().defined());
  CHECK_FALSE(params[1].grad().defined());
}

// ---- state ----
TEST_CASE("state saved and loaded into a fresh optimizer gives bit-identical next steps") {
  for (const std::string name :
       {"sgd_nesterov", "sgd_maximize", "adam_amsgrad", "adamw", "rmsprop_centered_momentum", "rmsprop_momentum",
        "sgd_groups", "adam_groups"}) {
    DYNAMIC_SECTION(name) {
      std::vector<Tensor> params = initial_params();
      auto original = make_case(name, params);
      for (int step = 0; step < 3; ++step) {
        set_reference_grads(params);
        original->step();
      }
      const NamedTensors saved = original->state();
      std::vector<Tensor> copies;
      for (const Tensor& p : params) copies.push_back(p.detach().clone().requires_grad_());
      auto resumed = make_case(name, copies);
      resumed->param_groups()[0].set_lr(123.0);  // overwritten by the load
      resumed->load_state(saved);
      for (int step = 0; step < 3; ++step) {
        set_reference_grads(params);
        set_reference_grads(copies);
        original->step();
        resumed->step();
      }
      for (std::size_t i = 0; i < params.size(); ++i) CHECK(identical(params[i], copies[i]));
      const NamedTensors a = original->state(), b = resumed->state();
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].first == b[i].first);
        CHECK(identical(a[i].second, b[i].second));
      }
    }
  }
}

TEST_CASE("state names follow group and position") {
  std::vector<Tensor> params = initial_params();
  Adam adam(params, AdamOptions{.amsgrad = true});
  set_reference_grads(params);
  adam.step();
  std::map<std::string, Tensor> state;
  for (const auto& [name, value] : adam.state()) state[name] = value;
  CHECK(state.at("group0.lr").item() == 1e-3);
  CHECK(state.at("group0.beta2").item() == 0.999);
  CHECK(state.at("group0.num_params").item() == 2);
  CHECK(state.at("group0.param1.step").dtype() == DType::Int64);
  CHECK(state.at("group0.param1.step").item() == 1);
  CHECK(state.at("group0.param0.exp_avg").shape() == Shape{2, 3});
  CHECK(state.count("group0.param1.max_exp_avg_sq") == 1);
  // The saved tensors are copies: training on does not change them.
  const Tensor saved = state.at("group0.param0.exp_avg").clone();
  set_reference_grads(params);
  adam.step();
  CHECK(identical(state.at("group0.param0.exp_avg"), saved));
}

TEST_CASE("a bad state is refused and leaves the optimizer unchanged") {
  std::vector<Tensor> params = initial_params();
  Adam adam(params);
  set_reference_grads(params);
  adam.step();
  const NamedTensors good = adam.state();
  const auto with = [&](const std::string& key, const Tensor& value) {
    NamedTensors edited = good;
    for (auto& [name, t] : edited)
      if (name == key) t = value;
    return edited;
  };
  const auto without = [&](const std::string& key) {
    NamedTensors edited;
    for (const auto& entry : good)
      if (entry.first != key) edited.push_back(entry);
    return edited;
  };
  NamedTensors extra = good;
  extra.emplace_back("group1.lr", scalar_tensor(0.1, DType::Float64));
  NamedTensors unknown = good;
  unknown.emplace_back("group0.param0.momentum_buffer", zeros({2, 3}, TensorOptions{}.with_dtype(DType::Float64)));
  const auto f64 = TensorOptions{}.with_dtype(DType::Float64);

  const std::vector<std::pair<NamedTensors, std::string>> cases = {
      {with("group0.param0.exp_avg", zeros({3, 2}, f64)),
       "Adam: load_state: entry 'group0.param0.exp_avg' is [3, 2] float64, but the parameter is [2, 3] float64"},
      {with("group0.param0.exp_avg", zeros({2, 3})),
       "Adam: load_state: entry 'group0.param0.exp_avg' is [2, 3] float32, but the parameter is [2, 3] float64"},
      {with("group0.lr", scalar_tensor(-0.5, DType::Float64)), "Adam: Invalid learning rate: -0.5 (parameter group 0)"},
      {with("group0.num_params", from_vector(std::vector<std::int64_t>{3}, Shape{})),
       "Adam: load_state: saved parameter group 0 has 3 parameter(s), this optimizer's has 2"},
      {without("group0.eps"), "Adam: load_state: missing entry 'group0.eps'"},
      {without("group0.param1.exp_avg_sq"),
       "Adam: load_state: missing entry 'group0.param1.exp_avg_sq' (the parameter has other state)"},
      {extra, "Adam: load_state: entry 'group1.lr' is for parameter group 1, but the optimizer has 1 group(s)"},
      {unknown, "Adam: load_state: unexpected state 'momentum_buffer' in entry 'group0.param0.momentum_buffer' "
                "(known: step, exp_avg, exp_avg_sq, max_exp_avg_sq)"},
      {with("group0.param0.step", scalar_tensor(1.0, DType::Float64)),
       "Adam: load_state: entry 'group0.param0.step' must be a 0-dim int64 tensor, got [] float64"},
  };
  set_reference_grads(params);
  adam.param_groups()[0].set_lr(0.25);
  adam.step();
  const NamedTensors before = adam.state();
  for (const auto& [entries, message] : cases) {
    CHECK_THROWS_WITH(adam.load_state(entries), message);
    const NamedTensors after = adam.state();
    REQUIRE(after.size() == before.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      CHECK(after[i].first == before[i].first);
      CHECK(identical(after[i].second, before[i].second));
    }
  }
}

// ---- convergence ----
TEST_CASE("Adam and SGD with momentum minimise a random convex quadratic") {
  // f(x) = 0.5 x^T A x - b^T x with A = M M^T + I (well conditioned, positive definite); minimum A x* = b.
  Generator generator(7);
  const int n = 5;
  const std::vector<double> m = randn({n, n}, generator, TensorOptions{}.with_dtype(DType::Float64)).to_vector();
  const std::vector<double> b = randn({n}, generator, TensorOptions{}.with_dtype(DType::Float64)).to_vector();
  std::vector<double> a(n * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < n; ++k) a[i * n + j] += m[i * n + k] * m[j * n + k] / n;
      if (i == j) a[i * n + j] += 1.0;
    }
  const auto gradient = [&](const Tensor& x) {
    const std::vector<double> v = x.to_vector();
    std::vector<double> g(n, 0.0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) g[i] += a[i * n + j] * v[j];
      g[i] -= b[i];
    }
    return from_vector(g, {n}, TensorOptions{}.with_dtype(DType::Float64));
  };
  const auto minimise = [&](Optimizer& optimizer, Tensor& x, int steps) {
    for (int step = 0; step < steps; ++step) {
      x.set_grad(gradient(x));
      optimizer.step();
    }
    double residual = 0.0;  // |A x - b|
    for (double g : gradient(x).to_vector()) residual += g * g;
    return std::sqrt(residual);
  };
  Tensor x_adam = zeros({n}, f64_grad()), x_sgd = zeros({n}, f64_grad());
  Adam adam({x_adam}, AdamOptions{.lr = 0.05});
  SGD sgd({x_sgd}, SGDOptions{.lr = 0.05, .momentum = 0.9});
  const double start = minimise(sgd, x_sgd, 0);
  CHECK(minimise(adam, x_adam, 3000) < 1e-6 * start);
  CHECK(minimise(sgd, x_sgd, 1000) < 1e-9 * start);
}


// ---- long parameters: the chunked, threaded update ----

TEST_CASE("a parameter longer than one chunk steps exactly as its pieces do, at 1 and 2 threads") {
  // Note: the update runs in chunks (across threads from 65,536 elements); an element takes the same bits
  // whichever chunk or thread updates it, so a long parameter must match its pieces stepped as separate
  // short parameters (each under one chunk, on the calling thread).
  const std::vector<std::int64_t> piece_sizes = {16384, 16383, 40000, 1, 30000, 2345};  // 105,113 in all
  std::int64_t n = 0;
  for (std::int64_t size : piece_sizes) n += size;
  Generator generator(11);
  const std::vector<double> start = randn({n}, generator).to_vector();
  std::vector<std::vector<double>> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(randn({n}, generator).to_vector());
  const TensorOptions f32_grad = TensorOptions{}.with_dtype(DType::Float32).with_requires_grad();
  const int threads_before = get_num_threads();
  const auto pieces_of = [&](const std::vector<double>& values) {
    std::vector<Tensor> pieces;
    std::int64_t offset = 0;
    for (std::int64_t size : piece_sizes) {
      pieces.push_back(from_vector(std::vector<double>(values.begin() + offset, values.begin() + offset + size), {size},
                              f32_grad));
      offset += size;
    }
    return pieces;
  };
  for (const std::string& name : all_cases) {
    if (name.find("groups") != std::string::npos) continue;  // those cases take two parameters
    for (int threads : {1, 2}) {
      CAPTURE(name, threads);
      set_num_threads(threads);
      Tensor whole = from_vector(start, {n}, f32_grad);
      std::vector<Tensor> pieces = pieces_of(start);
      auto whole_optimizer = make_case(name, {whole});
      auto pieces_optimizer = make_case(name, pieces);
      for (const std::vector<double>& g : grads) {
        whole.set_grad(from_vector(g, {n}, TensorOptions{}.with_dtype(DType::Float32)));
        const std::vector<Tensor> piece_grads = pieces_of(g);
        for (std::size_t i = 0; i < pieces.size(); ++i) pieces[i].set_grad(piece_grads[i].detach());
        whole_optimizer->step();
        pieces_optimizer->step();
      }
      CHECK(values_of({whole}) == values_of(pieces));
    }
  }
  set_num_threads(threads_before);
}
