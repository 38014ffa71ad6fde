#pragma once
/// Parameter initialisers with torch.nn.init's formulas. Each writes into its tensor in place, records
/// nothing (it runs under NoGradGuard, so parameters that require grad can be initialised) and draws from
/// the given generator, so a seeded generator gives a reproducible model. The tensor is taken as a handle
/// (copies alias), so `init::zeros_(module.parameter("bias"))` writes into the module; the handle is returned.
#include <tapegrad/export.h>
#include <cstdint>
#include <string_view>
#include <utility>

#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::init {

/// Which fan the Kaiming initialisers preserve: the forward pass's (fan_in) or the backward pass's (fan_out).
enum class FanMode { FanIn, FanOut };
/// The nonlinearity following the layer, for calculate_gain.
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };

/// torch.nn.init.calculate_gain: 1 for linear and sigmoid, 5/3 for tanh, sqrt(2) for relu,
/// sqrt(2 / (1 + param^2)) for leaky_relu (param is the negative slope), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
/// The same with PyTorch's names: "linear", "sigmoid", "tanh", "relu", "leaky_relu", "selu" (and the conv names,
/// which are linear); anything else is an error.
double calculate_gain(std::string_view nonlinearity, double param = 0.01);
/// (fan_in, fan_out) as PyTorch: dims 1 and 0 times the receptive field (product of dims 2..); needs >= 2 dims.
std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

/// Values uniform in [low, high).
Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0, Generator& generator = default_generator());
/// Values from N(mean, std^2).
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0, Generator& generator = default_generator());
/// Every value set to `value`.
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);
/// Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0, Generator& generator = default_generator());
/// Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0, Generator& generator = default_generator());
/// He: U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                        Generator& generator = default_generator());
/// He: N(0, std^2) with std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator& generator = default_generator());

}  // namespace tapegrad::init

TAPEGRAD_API_END
