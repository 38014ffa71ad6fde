#include <tapegrad/optim/sgd.h>

#include <cmath>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/optim/detail/chunks.h>
#include <tapegrad/optim/detail/kernel_flags.h>
#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

using detail::python_float;

namespace {

Options sgd_defaults(const SGDOptions& o) {
  if (std::isnan(o.lr)) fail("SGD: required hyperparameter lr not specified (set SGDOptions::lr)");
  return {{"lr", o.lr},           {"momentum", o.momentum}, {"dampening", o.dampening},
          {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov ? 1.0 : 0.0}, {"maximize", o.maximize ? 1.0 : 0.0}};
}

// Note: one pass over the raw data per parameter. Each line is one of PyTorch's tensor ops on the same values
// in the same order (scalars cast to T first, as ATen does), so float64 trajectories agree with PyTorch's to
// rounding; ATen's vectorised kernels may use fused multiply-adds, so the last bit can differ.
template <class T, bool Maximize, bool Decay, bool Momentum, bool FirstStep, bool Nesterov>
void sgd_kernel(T* __restrict p, const T* __restrict grad, T* __restrict buffer, std::int64_t n, double lr,
                double momentum, double dampening, double weight_decay) {
  const T wd = static_cast<T>(weight_decay), mu = static_cast<T>(momentum);
  const T keep = static_cast<T>(1.0 - dampening), neg_lr = static_cast<T>(-lr);
  for (std::int64_t i = 0; i < n; ++i) {
    T d = Maximize ? -grad[i] : grad[i];
    if constexpr (Decay) d = d + wd * p[i];
    if constexpr (Momentum) {
      const T b = FirstStep ? d : buffer[i] * mu + keep * d;
      buffer[i] = b;
      d = Nesterov ? d + mu * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : Optimizer("SGD", sgd_defaults(options)) {
  validate(defaults());
  if (groups.empty()) fail("SGD: optimizer got an empty parameter list");
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

void SGD::validate(const Options& o) const {
  const double lr = o.at("lr"), momentum = o.at("momentum"), weight_decay = o.at("weight_decay");
  if (!(lr >= 0.0)) fail("SGD: Invalid learning rate: {}", python_float(lr));
  if (!(momentum >= 0.0)) fail("SGD: Invalid momentum value: {}", python_float(momentum));
  if (!(weight_decay >= 0.0)) fail("SGD: Invalid weight_decay value: {}", python_float(weight_decay));
  if (o.at("nesterov") != 0.0 && (momentum <= 0.0 || o.at("dampening") != 0.0))
    fail("SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) {
  const Options& o = group.options;
  const double momentum = o.at("momentum");
  bool first_step = false;
  Tensor buffer;
  if (momentum != 0.0) {
    auto found = state.find("momentum_buffer");
    if (found == state.end()) {
      found = state.emplace("momentum_buffer", empty(param.shape(), param.dtype())).first;
      first_step = true;  // the kernel writes the buffer as the first g
    }
    buffer = found->second;
  }
  tapegrad::detail::dispatch_floating(param.dtype(), "SGD", [&](auto tag) {
    using T = decltype(tag);
    detail::with_flags(
        [&](auto maximize, auto decay, auto with_momentum, auto first, auto nesterov) {
          T* p = param.data<T>();
          const T* g = grad.data<T>();
          T* b = with_momentum ? buffer.data<T>() : nullptr;
          const double lr = o.at("lr"), dampening = o.at("dampening"), weight_decay = o.at("weight_decay");
          detail::for_chunks(param.numel(), [&](std::int64_t begin, std::int64_t count) {
            sgd_kernel<T, decltype(maximize)::value, decltype(decay)::value, decltype(with_momentum)::value,
                       decltype(first)::value, decltype(nesterov)::value>(
                p + begin, g + begin, b ? b + begin : nullptr, count, lr, momentum, dampening, weight_decay);
          });
        },
        o.at("maximize") != 0.0, o.at("weight_decay") != 0.0, buffer.defined(), first_step, o.at("nesterov") != 0.0);
  });
}

SGDParamState SGD::state(const Tensor& parameter) const {
  const ParamState& state = param_state(parameter, "SGD::state");
  return {state_entry(state, "momentum_buffer")};
}

}  // namespace tapegrad::optim
