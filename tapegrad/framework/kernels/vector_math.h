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

/// One row of an LSTM step, fused (ops/recurrent.cpp): for j < h and gate q in i, f, g, o (PyTorch's order),
/// gates[q h + j] = act_q(x[q h + j] + hidden[q h + j] + bias[q h + j]) (bias may be null; sigmoid, except tanh
/// for g), then c = f c_prev + i g, c_tanh = tanh(c) (kept for the backward) and u = o c_tanh. float32 uses the
/// functions above inline, in one vector loop; float64 std::exp and std::tanh.
void lstm_cell_forward(std::int64_t h, const float* x, const float* hidden, const float* bias, float* gates,
                       const float* c_prev, float* c, float* c_tanh, float* u);
void lstm_cell_forward(std::int64_t h, const double* x, const double* hidden, const double* bias, double* gates,
                       const double* c_prev, double* c, double* c_tanh, double* u);

/// Its backward for one row: from the saved gates, c_prev and c_tanh, the gradient d_u of u and d_cell (the
/// gradient of c from the step after, updated in place to that of c_prev), the gradients of the four gates'
/// pre-activations into d_gates [4 h].
void lstm_cell_backward(std::int64_t h, const float* gates, const float* c_prev, const float* c_tanh,
                        const float* d_u, float* d_cell, float* d_gates);
void lstm_cell_backward(std::int64_t h, const double* gates, const double* c_prev, const double* c_tanh,
                        const double* d_u, double* d_cell, double* d_gates);

}  // namespace tapegrad::kernels
