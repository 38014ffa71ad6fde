#pragma once
// Internal (not installed): BatchNorm's passes over a whole input viewed as [N, C, S] (S the product of the dims
// after the channel dim): batch statistics, the per-channel affine map, the gradient sums and the training dx.
// These choose the visiting order and the threads; the innermost loops are framework/kernels/batch_norm_runs.
// framework/ops/batch_norm.cpp checks the tensors, unwraps them into these pointers and records the backward.
#include <cstdint>
#include <vector>

namespace tapegrad::kernels {

/// A BatchNorm input viewed as [N, C, S]; S is 1 for [N, C].
struct BatchNormLayout {
  std::int64_t n = 0, c = 0, s = 1;
  std::int64_t per_channel() const { return n * s; }
  std::int64_t numel() const { return n * c * s; }
};

/// Note: with xhat = (x - mean) * invstd, the training gradient
///   dx = weight * invstd / n * (n*g - sum(g) - xhat * sum(g*xhat))
/// is affine in g and x per channel: dx = a*g + b*(x - mean) + d with the coefficients below.
struct TrainCoefficients {
  double a, b, d;
};
inline TrainCoefficients train_coefficients(double weight, double invstd, double sum_g, double sum_gxc, double n) {
  const double a = weight * invstd;
  return {a, -a * invstd * invstd * sum_gxc / n, -a * sum_g / n};
}

/// Channels [c0, c0 + width)'s dx coefficients in T, for the loops that read them per element: m (the mean), a, b
/// and d of train_coefficients, written from index 0 of each output.
template <class T>
void train_coefficients_in(std::int64_t c0, std::int64_t width, const std::vector<double>& weight,
                           const std::vector<double>& invstd, const std::vector<double>& mean,
                           const std::vector<double>& sum_g, const std::vector<double>& sum_gxc, double n, T* m, T* a,
                           T* b, T* d) {
  for (std::int64_t j = 0; j < width; ++j) {
    const auto c = static_cast<std::size_t>(c0 + j);
    const TrainCoefficients k = train_coefficients(weight[c], invstd[c], sum_g[c], sum_gxc[c], n);
    m[j] = static_cast<T>(mean[c]);
    a[j] = static_cast<T>(k.a);
    b[j] = static_cast<T>(k.b);
    d[j] = static_cast<T>(k.d);
  }
}

/// Training forward: per channel, the batch mean, the sum of squared deviations and 1/sqrt(var + eps) (double),
/// and y = (x - mean) * invstd * weight + bias, in one parallel sweep. `mean`, `var_sum`, `invstd` have C entries.
/// With `relu`, y is relu'd as it is stored (BatchNorm followed by ReLU in one pass, the same bits).
template <class T>
void batch_norm_train_forward(const T* x, const BatchNormLayout& l, const std::vector<double>& weight,
                              const std::vector<double>& bias, double eps, T* y, std::vector<double>& mean,
                              std::vector<double>& var_sum, std::vector<double>& invstd, bool relu = false);

/// out = (src - shift) * scale + offset per channel: the eval forward, and the eval dx (shift = offset = 0).
/// With `relu`, out is relu'd as it is stored.
template <class T>
void batch_norm_affine(const T* src, const BatchNormLayout& l, const std::vector<double>& shift,
                       const std::vector<double>& scale, const std::vector<double>& offset, T* out,
                       bool relu = false);

/// Per channel, sum(g) and sum(g * (x - mean)).
template <class T>
void batch_norm_grad_sums(const T* g, const T* x, const BatchNormLayout& l, const std::vector<double>& mean,
                          std::vector<double>& sum_g, std::vector<double>& sum_gxc);

/// The raw training backward: the gradient sums and, unless `dx` is null, dx, per channel in one parallel sweep.
/// With `relu_bias` (the forward's bias values), the forward was BatchNorm followed by ReLU and g is the gradient
/// of the ReLU's output: ReLU's rule is applied on the way, from ReLU's input recomputed from x.
template <class T>
void batch_norm_train_backward(const T* g, const T* x, const BatchNormLayout& l, const std::vector<double>& weight,
                               const std::vector<double>& mean, const std::vector<double>& invstd, T* dx,
                               std::vector<double>& sum_g, std::vector<double>& sum_gxc,
                               const std::vector<double>* relu_bias = nullptr);

}  // namespace tapegrad::kernels
