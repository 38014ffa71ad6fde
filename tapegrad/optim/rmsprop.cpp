#include <tapegrad/optim/rmsprop.h>

#include <cmath>

#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/optim/detail/chunks.h>
#include <tapegrad/optim/detail/kernel_flags.h>
#include <tapegrad/optim/detail/python_float.h>

namespace tapegrad::optim {

using detail::python_float;

namespace {

Options rmsprop_defaults(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// Note: one pass per parameter, each line one of PyTorch's tensor ops in its order: addcmul_ as
// (value * a) * b, addcdiv_ as (value * a) / b, sqrt then add_(eps).
template <class T, bool Maximize, bool Decay, bool Centered, bool Momentum>
void rmsprop_kernel(T* __restrict p, const T* __restrict grad, T* __restrict square_avg, T* __restrict grad_avg,
                    T* __restrict buffer, std::int64_t n, double lr, double alpha, double eps, double weight_decay,
                    double momentum) {
  const T a = static_cast<T>(alpha), keep = static_cast<T>(1.0 - alpha), e = static_cast<T>(eps);
  const T wd = static_cast<T>(weight_decay), mu = static_cast<T>(momentum), neg_lr = static_cast<T>(-lr);
  for (std::int64_t i = 0; i < n; ++i) {
    T g = Maximize ? -grad[i] : grad[i];
    if constexpr (Decay) g = g + wd * p[i];
    const T s = square_avg[i] * a + keep * g * g;
    square_avg[i] = s;
    T avg;
    if constexpr (Centered) {
      const T mean = grad_avg[i] * a + keep * g;
      grad_avg[i] = mean;
      avg = std::sqrt(s + (T(-1) * mean) * mean);
    } else {
      avg = std::sqrt(s);
    }
    avg = avg + e;
    if constexpr (Momentum) {
      const T b = buffer[i] * mu + (T(1) * g) / avg;
      buffer[i] = b;
      p[i] = p[i] + neg_lr * b;
    } else {
      p[i] = p[i] + neg_lr * g / avg;
    }
  }
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer("RMSprop", rmsprop_defaults(options)) {
  validate(defaults());
  if (groups.empty()) fail("RMSprop: optimizer got an empty parameter list");
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

void RMSprop::validate(const Options& o) const {
  const double lr = o.at("lr"), eps = o.at("eps"), momentum = o.at("momentum");
  const double weight_decay = o.at("weight_decay"), alpha = o.at("alpha");
  if (!(lr >= 0.0)) fail("RMSprop: Invalid learning rate: {}", python_float(lr));
  if (!(eps >= 0.0)) fail("RMSprop: Invalid epsilon value: {}", python_float(eps));
  if (!(momentum >= 0.0)) fail("RMSprop: Invalid momentum value: {}", python_float(momentum));
  if (!(weight_decay >= 0.0)) fail("RMSprop: Invalid weight_decay value: {}", python_float(weight_decay));
  if (!(alpha >= 0.0)) fail("RMSprop: Invalid alpha value: {}", python_float(alpha));
}

void RMSprop::update(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state) {
  const Options& o = group.options;
  const double momentum = o.at("momentum");
  const bool centered = o.at("centered") != 0.0;
  Tensor& square_avg = zeros_state(state, "square_avg", param);
  Tensor buffer = momentum > 0.0 ? zeros_state(state, "momentum_buffer", param) : Tensor();
  Tensor grad_avg = centered ? zeros_state(state, "grad_avg", param) : Tensor();
  increment_step(state);
  tapegrad::detail::dispatch_floating(param.dtype(), "RMSprop", [&](auto tag) {
    using T = decltype(tag);
    detail::with_flags(
        [&](auto maximize, auto decay, auto is_centered, auto with_momentum) {
          T *p = param.data<T>(), *square = square_avg.data<T>();
          T* average = is_centered ? grad_avg.data<T>() : nullptr;
          T* b = with_momentum ? buffer.data<T>() : nullptr;
          const T* g = grad.data<T>();
          const double lr = o.at("lr"), alpha = o.at("alpha"), eps = o.at("eps"), weight_decay = o.at("weight_decay");
          detail::for_chunks(param.numel(), [&](std::int64_t begin, std::int64_t count) {
            rmsprop_kernel<T, decltype(maximize)::value, decltype(decay)::value, decltype(is_centered)::value,
                           decltype(with_momentum)::value>(p + begin, g + begin, square + begin,
                                                           average ? average + begin : nullptr,
                                                           b ? b + begin : nullptr, count, lr, alpha, eps,
                                                           weight_decay, momentum);
          });
        },
        o.at("maximize") != 0.0, o.at("weight_decay") != 0.0, centered, buffer.defined());
  });
}

RMSpropParamState RMSprop::state(const Tensor& parameter) const {
  const ParamState& state = param_state(parameter, "RMSprop::state");
  return {state_entry(state, "step"), state_entry(state, "square_avg"), state_entry(state, "momentum_buffer"),
          state_entry(state, "grad_avg")};
}

}  // namespace tapegrad::optim
