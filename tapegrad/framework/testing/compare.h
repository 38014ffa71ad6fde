#pragma once
/// Tensor comparisons for tests (allclose, identical) whose failures name the worst element, and the
/// macros that turn a failed check into a failed RapidCheck property with the check's message.
#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/gradcheck/gradcheck.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::testing {

/// The outcome of a check: converts to bool; `message` says why it failed (empty when it did not).
/// Note: the conversion is implicit so that existing `RC_ASSERT(allclose(a, b))` and `return identical(a, b);`
/// keep working; Catch2 and RapidCheck print the message through operator<< when an assertion fails.
struct CheckResult {
  bool ok = true;
  std::string message;
  operator bool() const { return ok; }  // NOLINT(google-explicit-constructor)
};

inline std::ostream& operator<<(std::ostream& out, const CheckResult& c) {
  return out << (c.ok ? std::string("equal") : c.message);
}

/// The multi-index of flat element `flat` of `shape`, as "[1, 0, 2]".
inline std::string index_string(const Shape& shape, std::int64_t flat) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_string(index);
}

namespace internal {
inline CheckResult shapes_differ(const char* what, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined())
    return {false, fmt::format("{}: {} tensor vs {} tensor", what, a.defined() ? "a defined" : "an undefined",
                               b.defined() ? "a defined" : "an undefined")};
  if (a.shape() != b.shape())
    return {false, fmt::format("{}: shapes differ, {} vs {}", what, shape_string(a.shape()), shape_string(b.shape()))};
  return {};
}
}  // namespace internal

/// Elementwise closeness: |a - b| <= atol + rtol * |b| everywhere, same shape (dtypes may differ).
inline CheckResult allclose(const Tensor& a, const Tensor& b, double rtol = 1e-10, double atol = 1e-12) {
  if (CheckResult c = internal::shapes_differ("allclose", a, b); !c) return c;
  const auto va = a.to_vector(), vb = b.to_vector();
  std::int64_t worst = -1, failing = 0;
  double worst_excess = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double excess = std::abs(va[i] - vb[i]) - (atol + rtol * std::abs(vb[i]));
    if (excess <= 0) continue;
    ++failing;
    if (worst < 0 || excess > worst_excess || std::isnan(excess)) {
      worst = static_cast<std::int64_t>(i);
      worst_excess = std::isnan(excess) ? INFINITY : excess;
    }
  }
  if (worst < 0) return {};
  const auto w = static_cast<std::size_t>(worst);
  return {false, fmt::format("allclose: {} of {} elements differ; worst is element {} {}: {} vs {} (|diff| {:g} > "
                             "atol {:g} + rtol {:g} * {:g})",
                             failing, va.size(), worst, index_string(a.shape(), worst), va[w], vb[w],
                             std::abs(va[w] - vb[w]), atol, rtol, std::abs(vb[w]))};
}

/// Bitwise equality of shape, dtype and every element's bytes (so NaN equals the same NaN, -0 differs from 0).
inline CheckResult identical(const Tensor& a_in, const Tensor& b_in) {
  if (CheckResult c = internal::shapes_differ("identical", a_in, b_in); !c) return c;
  const Tensor a = a_in.detach().contiguous(), b = b_in.detach().contiguous();  // views compare by their values
  if (a.dtype() != b.dtype())
    return {false, fmt::format("identical: dtypes differ, {} vs {}", dtype_name(a.dtype()), dtype_name(b.dtype()))};
  const std::size_t size = element_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  if (a.numel() == 0 || std::memcmp(pa, pb, size * static_cast<std::size_t>(a.numel())) == 0) return {};
  const auto va = a.to_vector(), vb = b.to_vector();
  std::int64_t worst = -1, differing = 0;
  double worst_diff = -1;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const auto offset = static_cast<std::size_t>(i) * size;
    if (std::memcmp(pa + offset, pb + offset, size) == 0) continue;
    ++differing;
    const double diff = std::abs(va[static_cast<std::size_t>(i)] - vb[static_cast<std::size_t>(i)]);
    if (worst < 0 || diff > worst_diff) worst = i, worst_diff = std::isnan(diff) ? INFINITY : diff;
  }
  const auto w = static_cast<std::size_t>(worst);
  return {false, fmt::format("identical: {} of {} elements differ in their bits; largest difference at element {} "
                             "{}: {} vs {}",
                             differing, a.numel(), worst, index_string(a.shape(), worst), va[w], vb[w])};
}

}  // namespace tapegrad::testing

/// Fails the current RapidCheck property with the message of `check` (a CheckResult, GradcheckResult or any
/// result with `ok` and `message`) when it failed.
#define TAPEGRAD_RC_CHECK(check)                          \
  do {                                                    \
    const auto tapegrad_result_ = (check);                \
    if (!tapegrad_result_.ok) RC_FAIL(tapegrad_result_.message); \
  } while (false)

/// Fails the current RapidCheck property with gradcheck's message when the check fails.
#define TAPEGRAD_RC_GRADCHECK(f, inputs) TAPEGRAD_RC_CHECK(::tapegrad::gradcheck(f, inputs))
/// Fails the current RapidCheck property with gradgradcheck's message when the check fails.
#define TAPEGRAD_RC_GRADGRADCHECK(f, inputs) TAPEGRAD_RC_CHECK(::tapegrad::gradgradcheck(f, inputs))
/// Fails the current RapidCheck property, naming the worst element, unless a and b are allclose.
#define TAPEGRAD_RC_ALLCLOSE(...) TAPEGRAD_RC_CHECK(::tapegrad::testing::allclose(__VA_ARGS__))
/// Fails the current RapidCheck property, naming the largest difference, unless a and b are identical.
#define TAPEGRAD_RC_IDENTICAL(a, b) TAPEGRAD_RC_CHECK(::tapegrad::testing::identical(a, b))
