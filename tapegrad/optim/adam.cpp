#include <tapegrad/optim/adam.h>

#include <cmath>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/optim/detail/chunks.h>
#include <tapegrad/optim/detail/kernel_flags.h>
#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

using detail::python_float;

namespace {

Options adam_defaults(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

AdamOptions as_adam(const AdamWOptions& o) { return {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize}; }

/// Scalars of one step, computed in double as PyTorch's Python code does, then cast to T by the kernel.
struct AdamStep {
  double beta1, beta2, eps, weight_decay, decay_factor, step_size, bias_correction2_sqrt;
  bool decoupled, maximize;
};

// Note: one pass over the raw data per parameter, each line one of PyTorch's tensor ops in the same order
// (mul_ then add_, addcmul_ as (value * a) * b, addcdiv_ as (value * a) / b). ATen's vectorised kernels
// may fuse multiply-adds, so float64 results agree with PyTorch to rounding, not always to the last bit.
template <class T, bool Maximize, bool Decoupled, bool L2, bool Amsgrad>
void adam_kernel(T* __restrict p, const T* __restrict grad, T* __restrict exp_avg, T* __restrict exp_avg_sq,
                 T* __restrict max_exp_avg_sq, std::int64_t n, const AdamStep& s) {
  const T b1 = static_cast<T>(s.beta1), keep1 = static_cast<T>(1.0 - s.beta1);
  const T b2 = static_cast<T>(s.beta2), keep2 = static_cast<T>(1.0 - s.beta2);
  const T eps = static_cast<T>(s.eps), wd = static_cast<T>(s.weight_decay);
  const T decay_factor = static_cast<T>(s.decay_factor), neg_step = static_cast<T>(-s.step_size);
  const T bc2_sqrt = static_cast<T>(s.bias_correction2_sqrt);
  for (std::int64_t i = 0; i < n; ++i) {
    T g = Maximize ? -grad[i] : grad[i];
    T value = p[i];
    if constexpr (Decoupled) value = value * decay_factor;
    if constexpr (L2) g = g + wd * value;
    const T m = exp_avg[i] * b1 + keep1 * g;
    const T v = exp_avg_sq[i] * b2 + keep2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T second = v;
    if constexpr (Amsgrad) {
      const T previous = max_exp_avg_sq[i];
      second = (previous != previous || previous > v) ? previous : v;  // torch.maximum propagates NaN
      max_exp_avg_sq[i] = second;
    }
    const T denom = std::sqrt(second) / bc2_sqrt + eps;
    p[i] = value + neg_step * m / denom;
  }
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam("Adam", std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam("Adam", std::move(groups), options, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(name), adam_defaults(options)), decoupled_(decoupled) {
  validate(defaults());
  if (groups.empty()) fail("{}: optimizer got an empty parameter list", this->name());
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam("AdamW", std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, as_adam(options), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam("AdamW", std::move(groups), as_adam(options), true) {}

void Adam::validate(const Options& o) const {
  const double lr = o.at("lr"), eps = o.at("eps"), beta1 = o.at("beta1"), beta2 = o.at("beta2");
  const double weight_decay = o.at("weight_decay");
  if (!(lr >= 0.0)) fail("{}: Invalid learning rate: {}", name(), python_float(lr));
  if (!(eps >= 0.0)) fail("{}: Invalid epsilon value: {}", name(), python_float(eps));
  if (!(beta1 >= 0.0 && beta1 < 1.0)) fail("{}: Invalid beta parameter at index 0: {}", name(), python_float(beta1));
  if (!(beta2 >= 0.0 && beta2 < 1.0)) fail("{}: Invalid beta parameter at index 1: {}", name(), python_float(beta2));
  if (!(weight_decay >= 0.0)) fail("{}: Invalid weight_decay value: {}", name(), python_float(weight_decay));
}

void Adam::update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) {
  const Options& o = group.options;
  const bool amsgrad = o.at("amsgrad") != 0.0;
  Tensor& exp_avg = zeros_state(state, "exp_avg", param);
  Tensor& exp_avg_sq = zeros_state(state, "exp_avg_sq", param);
  Tensor max_exp_avg_sq = amsgrad ? zeros_state(state, "max_exp_avg_sq", param) : Tensor();

  const std::int64_t t = increment_step(state);
  AdamStep s{};
  s.beta1 = o.at("beta1");
  s.beta2 = o.at("beta2");
  s.eps = o.at("eps");
  s.weight_decay = o.at("weight_decay");
  s.decay_factor = 1.0 - o.at("lr") * s.weight_decay;
  s.step_size = o.at("lr") / (1.0 - std::pow(s.beta1, static_cast<double>(t)));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(t)));
  s.decoupled = decoupled_;
  s.maximize = o.at("maximize") != 0.0;
  tapegrad::detail::dispatch_floating(param.dtype(), name().c_str(), [&](auto tag) {
    using T = decltype(tag);
    detail::with_flags(
        [&](auto maximize, auto decoupled, auto l2, auto ams) {
          T *p = param.data<T>(), *m = exp_avg.data<T>(), *v = exp_avg_sq.data<T>();
          T* v_max = ams ? max_exp_avg_sq.data<T>() : nullptr;
          const T* g = grad.data<T>();
          detail::for_chunks(param.numel(), [&](std::int64_t begin, std::int64_t count) {
            adam_kernel<T, decltype(maximize)::value, decltype(decoupled)::value, decltype(l2)::value,
                        decltype(ams)::value>(p + begin, g + begin, m + begin, v + begin,
                                              v_max ? v_max + begin : nullptr, count, s);
          });
        },
        s.maximize, decoupled_, !decoupled_ && s.weight_decay != 0.0, amsgrad);
  });
}

AdamParamState Adam::state(const Tensor& parameter) const {
  const ParamState& state = param_state(parameter, fmt::format("{}::state", name()).c_str());
  return {state_entry(state, "step"), state_entry(state, "exp_avg"), state_entry(state, "exp_avg_sq"),
          state_entry(state, "max_exp_avg_sq")};
}

}  // namespace tapegrad::optim
