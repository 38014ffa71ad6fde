#pragma once
/// 2-d pooling over [N, C, H, W] (or unbatched [C, H, W]): max, average and adaptive average.
/// Note: output extents follow PyTorch: (H + 2*pad - dil*(k-1) - 1) / stride + 1, rounded down, or up in
/// ceil_mode (where a last window that would start in the right padding is dropped). Padding may be at
/// most half the kernel. Unlike PyTorch, a dilated max-pool window that holds only padding is an error
/// (PyTorch returns -inf there with an index outside the plane).
#include <tapegrad/export.h>
#include <cstdint>
#include <optional>
#include <utility>

#include <tapegrad/framework/ops/conv.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Maximum over each window; padding never wins. The gradient goes to the first maximum of each window
/// (row-major order), as in PyTorch. `stride` defaults to `kernel_size`.
Tensor max_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride = std::nullopt,
                  IntPair padding = 0, IntPair dilation = 1, bool ceil_mode = false);
/// max_pool2d plus the int64 indices of the chosen elements, flattened within each H x W plane.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntPair kernel_size,
                                                  std::optional<IntPair> stride = std::nullopt, IntPair padding = 0,
                                                  IntPair dilation = 1, bool ceil_mode = false);

/// Mean over each window. count_include_pad counts the zero padding in the divisor (PyTorch's default);
/// divisor_override, when set, replaces the divisor altogether.
Tensor avg_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride = std::nullopt,
                  IntPair padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<std::int64_t> divisor_override = std::nullopt);

/// Mean over windows chosen to give `output_size`: output row i averages input rows
/// [floor(i*H/OH), ceil((i+1)*H/OH)), likewise for columns (PyTorch's formula; windows may overlap).
Tensor adaptive_avg_pool2d(const Tensor& input, IntPair output_size);

}  // namespace tapegrad

TAPEGRAD_API_END
