#pragma once
// Internal (not installed): BatchNorm's innermost loops, over one run of a channel (S contiguous values of
// one sample) or over one row of a block of channels ([N, C] inputs). framework/kernels/batch_norm_passes.cpp
// decides the visiting order and threads; these compute, dispatched to AVX2 / AVX-512 at run time
// (framework/kernels/dispatch.h). Sums are in double, whatever T.
#include <cstdint>

namespace tapegrad::kernels {

/// sum += sum(p[i] - x0), squares += sum((p[i] - x0)^2) over i < n.
void shifted_moments(const float* p, std::int64_t n, double x0, double& sum, double& squares);
void shifted_moments(const double* p, std::int64_t n, double x0, double& sum, double& squares);

/// q[i] = (p[i] - shift) * scale + offset.
void affine(const float* p, float* q, std::int64_t n, float shift, float scale, float offset);
void affine(const double* p, double* q, std::int64_t n, double shift, double scale, double offset);
/// q[i] = relu((p[i] - shift) * scale + offset): the same bits as affine() followed by relu.
void affine_relu(const float* p, float* q, std::int64_t n, float shift, float scale, float offset);
void affine_relu(const double* p, double* q, std::int64_t n, double shift, double scale, double offset);

/// sum_g += sum(g[i]), sum_gxc += sum(g[i] * (x[i] - mean)).
void grad_sums(const float* g, const float* x, std::int64_t n, double mean, double& sum_g, double& sum_gxc);
void grad_sums(const double* g, const double* x, std::int64_t n, double mean, double& sum_g, double& sum_gxc);

/// dx[i] = a * g[i] + b * (x[i] - mean) + d.
void grad_input(const float* g, const float* x, float* dx, std::int64_t n, float mean, float a, float b, float d);
void grad_input(const double* g, const double* x, double* dx, std::int64_t n, double mean, double a, double b,
                double d);

// The same two with ReLU's backward rule folded in, for BatchNorm followed by ReLU: g[i] counts only where the
// forward's ReLU input y = (x[i] - shift) * scale + offset is > 0 or NaN. y is recomputed with the forward's
// arithmetic (affine_relu's; this file is built without FMA contraction), so it has the forward's bits and the
// mask is ReLU's own, without the forward's output being saved or read.

/// grad_sums over the masked g; shift is the forward's float-typed mean.
void grad_sums_relu(const float* g, const float* x, std::int64_t n, double mean, float shift, float scale,
                    float offset, double& sum_g, double& sum_gxc);
void grad_sums_relu(const double* g, const double* x, std::int64_t n, double mean, double shift, double scale,
                    double offset, double& sum_g, double& sum_gxc);
/// grad_input over the masked g; the mask's shift is `mean`.
void grad_input_relu(const float* g, const float* x, float* dx, std::int64_t n, float mean, float a, float b,
                     float d, float scale, float offset);
void grad_input_relu(const double* g, const double* x, double* dx, std::int64_t n, double mean, double a, double b,
                     double d, double scale, double offset);

// Row versions for a block of `width` channels, one coefficient per lane.

/// acc[j] += row[j].
void accumulate_row(const float* row, std::int64_t width, double* acc);
void accumulate_row(const double* row, std::int64_t width, double* acc);
/// acc[j] += (row[j] - mean[j])^2.
void accumulate_squared_deviation_row(const float* row, std::int64_t width, const double* mean, double* acc);
void accumulate_squared_deviation_row(const double* row, std::int64_t width, const double* mean, double* acc);
/// q[j] = (p[j] - shift[j]) * scale[j] + offset[j].
void affine_row(const float* p, float* q, std::int64_t width, const float* shift, const float* scale,
                const float* offset);
void affine_row(const double* p, double* q, std::int64_t width, const double* shift, const double* scale,
                const double* offset);
/// q[j] = relu((p[j] - shift[j]) * scale[j] + offset[j]).
void affine_row_relu(const float* p, float* q, std::int64_t width, const float* shift, const float* scale,
                     const float* offset);
void affine_row_relu(const double* p, double* q, std::int64_t width, const double* shift, const double* scale,
                     const double* offset);
/// sum_g[j] += g[j], sum_gxc[j] += g[j] * (x[j] - mean[j]).
void grad_sums_row(const float* g, const float* x, std::int64_t width, const double* mean, double* sum_g,
                   double* sum_gxc);
void grad_sums_row(const double* g, const double* x, std::int64_t width, const double* mean, double* sum_g,
                   double* sum_gxc);
/// dx[j] = a[j] * g[j] + b[j] * (x[j] - mean[j]) + d[j].
void grad_input_row(const float* g, const float* x, float* dx, std::int64_t width, const float* mean, const float* a,
                    const float* b, const float* d);
void grad_input_row(const double* g, const double* x, double* dx, std::int64_t width, const double* mean,
                    const double* a, const double* b, const double* d);

/// grad_sums_row and grad_input_row over the masked g (as grad_sums_relu), one mask coefficient per lane.
void grad_sums_row_relu(const float* g, const float* x, std::int64_t width, const double* mean, const float* shift,
                        const float* scale, const float* offset, double* sum_g, double* sum_gxc);
void grad_sums_row_relu(const double* g, const double* x, std::int64_t width, const double* mean,
                        const double* shift, const double* scale, const double* offset, double* sum_g,
                        double* sum_gxc);
void grad_input_row_relu(const float* g, const float* x, float* dx, std::int64_t width, const float* mean,
                         const float* a, const float* b, const float* d, const float* scale, const float* offset);
void grad_input_row_relu(const double* g, const double* x, double* dx, std::int64_t width, const double* mean,
                         const double* a, const double* b, const double* d, const double* scale,
                         const double* offset);

/// invstd[c] = 1 / sqrt(var[c] + eps) and scale[c] = invstd[c] * weight[c] (weight 1 where null), c < channels: the
/// eval coefficients. Note: dispatched because the per-channel square root and division, serial at the baseline,
/// were 3% of a batch-1 inference step (two BatchNorm1d(512)); sqrt and division round exactly in every clone.
void eval_coefficients(const double* var, const double* weight, double eps, std::int64_t channels, double* invstd,
                       double* scale);

}  // namespace tapegrad::kernels
