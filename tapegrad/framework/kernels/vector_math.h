#pragma once
// Internal (not installed): the logistic sigmoid and tanh over arrays, the transcendental part of the recurrent
// layers' gate passes.
#include <cstdint>

namespace tapegrad::kernels {

/// y[k] = 1 / (1 + exp(-x[k])) for k < n; y may be x (in place).
/// Note: float32 is tapegrad's own exp (a Taylor polynomial after the usual ln 2 range reduction, no table, no
/// branch), vectorised and dispatched to AVX2 / AVX-512 at run time: glibc's scalar expf/tanhf were a third of an
/// LSTM training step. At most 3 ulp from the correctly rounded result over every float (tests/
/// test_kernels_vector_math.cpp measures it), NaN in gives NaN out, sigmoid(-inf) = 0, sigmoid(+inf) = 1, and
/// results below FLT_MIN come out as the nearest subnormals rather than flushed. float64 calls std::exp.
void sigmoid(std::int64_t n, const float* x, float* y);
void sigmoid(std::int64_t n, const double* x, double* y);

/// y[k] = tanh(x[k]) for k < n; y may be x. Same method and bounds as sigmoid: tanh(|x|) = -q / (q + 2) with
/// q = expm1(-2|x|), which keeps full relative accuracy near 0 (tanh(x) = x for tiny x, including subnormals).
/// float64 calls std::tanh.
void tanh(std::int64_t n, const float* x, float* y);
void tanh(std::int64_t n, const double* x, double* y);

}  // namespace tapegrad::kernels
