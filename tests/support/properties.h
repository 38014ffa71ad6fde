#pragma once
// Shared helpers for gradient properties: one line per op in the test files.
#include <catch2/catch.hpp>
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include "framework/gradcheck/generators.h"
#include "framework/gradcheck/gradcheck.h"

namespace tapegrad::testing {

/// Fails the current RapidCheck property with gradcheck's message when the check fails.
#define TAPEGRAD_RC_GRADCHECK(f, inputs)                         \
  do {                                                          \
    const auto tapegrad_result_ = ::tapegrad::gradcheck(f, inputs); \
    if (!tapegrad_result_.ok) RC_FAIL(tapegrad_result_.message);  \
  } while (false)

#define TAPEGRAD_RC_GRADGRADCHECK(f, inputs)                         \
  do {                                                              \
    const auto tapegrad_result_ = ::tapegrad::gradgradcheck(f, inputs); \
    if (!tapegrad_result_.ok) RC_FAIL(tapegrad_result_.message);      \
  } while (false)

/// Elementwise closeness for tests: |a - b| <= atol + rtol * |b| everywhere, same shape.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-10, double atol = 1e-12) {
  if (a.shape() != b.shape()) return false;
  const auto va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  return true;
}

/// Bitwise equality of values, shape and dtype.
inline bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector() == b.to_vector();
}

}  // namespace tapegrad::testing
