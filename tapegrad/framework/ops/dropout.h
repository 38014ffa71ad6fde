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

/// Channel-wise dropout (PyTorch's dropout2d): for input [N, C, H, W] each of the N*C feature maps is zeroed as a
/// whole with probability p and the kept ones are scaled by 1 / (1 - p); an input [C, H, W] is one unbatched
/// sample (C maps). The identity (the same handle) when !training or p == 0. Backward: g times the same mask.
/// Note: PyTorch 1.13 reads a 3-d input as [N, C, L] (with a warning that this will change); later releases, and
/// tapegrad, read it as [C, H, W].
Tensor dropout2d(const Tensor& x, double p, bool training, Generator& generator = default_generator());

}  // namespace tapegrad

TAPEGRAD_API_END
