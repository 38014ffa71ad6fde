#pragma once
/// tapegrad's exception type and the helpers that build its messages.
#include <tapegrad/export.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Every error tapegrad reports: bad shapes, bad dtypes, bad files, misuse of autograd.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws tapegrad::Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tapegrad

TAPEGRAD_API_END
