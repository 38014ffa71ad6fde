#pragma once
// Internal: Python's repr of a float, so validation messages read exactly as PyTorch's do.
#include <string>

#include <fmt/format.h>

namespace tapegrad::optim::detail {

/// "1.0", "-0.1", "1e-08", "inf", "nan": fmt's shortest round-trip form plus Python's ".0" on whole numbers.
inline std::string python_float(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

}  // namespace tapegrad::optim::detail
