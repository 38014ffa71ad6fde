#pragma once
// Internal: the int64 sum (reduction.cpp's sum routes int64 tensors here; sum_to stays floating, since it
// is the gradient path of every broadcasting op and gradients are never integers).
#include <cstdint>
#include <vector>

#include <tapegrad/framework/tensor.h>

namespace tapegrad::detail {

/// Sum of an int64 tensor over `dims` (sorted or not, negative allowed), wrapping modulo 2^64 as PyTorch.
Tensor integer_sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim);

}  // namespace tapegrad::detail
