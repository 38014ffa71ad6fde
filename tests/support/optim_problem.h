#pragma once
// The problem of tests/reference/make_optim_reference.py: its initial parameters (from optim_reference.txt) and
// its gradient, so every optimizer test starts from the numbers PyTorch started from.
#include <algorithm>
#include <cmath>
#include <vector>

#include <tapegrad/tapegrad.h>
#include "support/optim_reference.h"

namespace tapegrad::testing {

// Relative-ish closeness: |a - b| <= 1e-12 * max(1, |b|) everywhere.
inline bool close_to(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
  if (actual.size() != expected.size()) return false;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!(std::abs(actual[i] - expected[i]) <= tolerance * std::max(1.0, std::abs(expected[i])))) return false;
  return true;
}

inline const std::vector<Shape> param_shapes = {{2, 3}, {4}};
inline const std::vector<double> grad_offsets = {0.1, -0.2};

inline std::vector<Tensor> initial_params(DType dtype = DType::Float64) {
  std::vector<Tensor> params;
  for (std::size_t i = 0; i < param_shapes.size(); ++i)
    params.push_back(from_vector(reference_values(fmt::format("init/param{}", i)), param_shapes[i],
                                 TensorOptions{}.with_dtype(dtype).with_requires_grad()));
  return params;
}

// The reference's gradient g = p * p - 0.5 * p + c, op by op as in the Python script.
inline void set_reference_grads(std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor p = params[i].detach();
    params[i].set_grad(p * p - p * 0.5 + grad_offsets[i]);
  }
}

}  // namespace tapegrad::testing
