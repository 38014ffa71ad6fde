#pragma once
// Inputs for normalization layers whose gradients are checked by finite differences.
#include <tapegrad/framework/gradcheck/generators.h>

namespace tapegrad::testing {

/// An [N, C, ...] float64 tensor: random values in [-1, 1] plus a ramp of 2.5 per position within the channel,
/// so neighbouring values of a channel differ by at least 0.5 and finite differences stay far from the var = 0
/// singularity of 1/sqrt(var + eps). Draws from RapidCheck: call it inside a property.
inline Tensor spread_input(const Shape& s) {
  Tensor x = *gen::tensor_of_shape(s, -1.0, 1.0);
  double* p = x.data<double>();
  const std::int64_t per_n = x.numel() / s[0], spatial = per_n / s[1];
  for (std::int64_t n = 0; n < s[0]; ++n)
    for (std::int64_t i = 0; i < per_n; ++i) p[n * per_n + i] += 2.5 * static_cast<double>(n * spatial + i % spatial);
  return x;
}

}  // namespace tapegrad::testing
