#pragma once
// Internal: SyncBatchNorm's local passes over one rank's input viewed as [N, C, S] (S the product of the dims
// after the channel dim): this rank's per-channel moments and gradient sums, which the layer then combines over
// the ranks, and the two elementwise passes that use the global values. Sums in double, whatever T (float or
// double). sync_batch_norm_passes.cpp says how they visit the tensor and why.
#include <cstdint>
#include <vector>

namespace tapegrad::distributed::detail {

/// An input viewed as [N, C, S]; S is 1 for [N, C].
struct ChannelLayout {
  std::int64_t n = 0, c = 0, s = 1;
  std::int64_t per_channel() const { return n * s; }
};

/// Per channel, this rank's mean and sum of squared deviations (M2), in one pass (the values shifted by the
/// channel's first value, BatchNorm's algorithm). `mean` and `m2` have C entries.
template <class T>
void local_moments(const T* x, const ChannelLayout& l, std::vector<double>& mean, std::vector<double>& m2);

/// out = (x - mean) * scale + offset per channel, each operation rounded in T.
template <class T>
void normalize(const T* x, const ChannelLayout& l, const std::vector<double>& mean, const std::vector<double>& scale,
               const std::vector<double>& offset, T* out);

/// Per channel, this rank's sum(g) and sum(g * (x - mean)).
template <class T>
void local_grad_sums(const T* g, const T* x, const ChannelLayout& l, const std::vector<double>& mean, double* sum_g,
                     double* sum_gxc);

/// dx = weight * invstd * (g - sum_g / count - (x - mean) * invstd^2 * sum_gxc / count) with the global sums and
/// count.
template <class T>
void grad_input(const T* g, const T* x, const ChannelLayout& l, const std::vector<double>& weight,
                const std::vector<double>& mean, const std::vector<double>& invstd, const double* sum_g,
                const double* sum_gxc, double count, T* dx);

}  // namespace tapegrad::distributed::detail
