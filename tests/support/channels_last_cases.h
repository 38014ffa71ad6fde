// Inputs shared by the channels-last tests: the four binary ops whose output format and gradients follow
// PyTorch's TensorIterator, and a deterministic ramp of values.
#pragma once

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tapegrad::testing {

using BinaryOp = std::function<Tensor(const Tensor&, const Tensor&)>;

inline const std::vector<std::pair<const char*, BinaryOp>> binary_ops = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
};

/// sin(0.7 i + 0.3) over the elements in row-major order: distinct, bounded, no zeros at small sizes.
inline Tensor sine_ramp(const Shape& shape, DType dtype = DType::Float32) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
  return from_vector(v, shape, TensorOptions{}.with_dtype(dtype));
}

}  // namespace tapegrad::testing
