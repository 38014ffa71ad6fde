#pragma once
/// Gradient clipping by total norm or by value (PyTorch's torch.nn.utils.clip_grad_norm_ / clip_grad_value_).
#include <tapegrad/export.h>
#include <limits>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::optim {

/// Note: the norm is taken over every defined grad as if concatenated: the norm of the per-tensor norms
/// (norm_type > 0, or infinity for the largest magnitude). When max_norm / (total + 1e-6) < 1, every grad
/// is scaled by it in place; a NaN total scales by NaN, as PyTorch does. Parameters without a grad are
/// skipped. Returns the total norm before clipping (0 when no parameter has a grad). With
/// error_if_nonfinite a NaN or infinite total throws PyTorch's message and no grad changes.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every defined grad into [-clip_value, clip_value] in place (NaN stays NaN).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

/// The infinity norm_type for clip_grad_norm_.
inline constexpr double inf_norm = std::numeric_limits<double>::infinity();

}  // namespace tapegrad::optim

TAPEGRAD_API_END
