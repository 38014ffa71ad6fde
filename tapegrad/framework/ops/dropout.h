#pragma once
/// Inverted dropout as one op: out = x * mask / (1 - p), with the mask drawn from a generator.
#include <tapegrad/export.h>
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Zeroes each element with probability p and scales the kept ones by 1 / (1 - p), so the expected value is
/// unchanged; the identity (the same handle) when !training or p == 0, all zeros when p == 1.
/// p must be in [0, 1]. Backward: g * mask / (1 - p), the same mask.
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator = default_generator());

}  // namespace tapegrad

TAPEGRAD_API_END
