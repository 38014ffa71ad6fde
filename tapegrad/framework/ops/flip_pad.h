#pragma once
/// Reversing and padding: flip, and pad with torch.nn.functional.pad's conventions and modes.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// x with the order of its elements reversed along each of `dims` (negative count from the end; none may
/// repeat; an empty list copies x). Any dtype; a fresh tensor, as torch.flip.
Tensor flip(const Tensor& x, const std::vector<std::int64_t>& dims);

/// How pad fills the new border (libtorch's torch::kConstant, torch::kReflect, torch::kReplicate).
enum class PadMode {
  Constant,   ///< `value` everywhere outside x; negative pads crop. Any number of dims, any dtype.
  Reflect,    ///< x mirrored at its edges without repeating the edge (each pad < the dim's size).
  Replicate,  ///< the edge element repeated.
};

/// Pads (or, with negative amounts, crops) x as torch.nn.functional.pad: `pads` holds (before, after) pairs
/// starting from the last dim, {left, right, top, bottom, front, back, ...}, at most 2 * x.dim() entries.
/// Reflect and Replicate pad the last 1, 2 or 3 dims of an input with one or two more dims (a batch and a
/// channel dim, or only a channel dim), floating only, and every output extent must be at least 1, as in
/// PyTorch 1.13.
Tensor pad(const Tensor& x, const std::vector<std::int64_t>& pads, PadMode mode = PadMode::Constant,
           double value = 0.0);

}  // namespace tapegrad

TAPEGRAD_API_END
