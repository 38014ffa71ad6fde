#pragma once
/// tapegrad's exception type and the helpers that build its messages.
#include <tapegrad/export.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Every error tapegrad reports: bad shapes, bad dtypes, bad files, misuse of autograd.
/// Note: the message is made safe to print whatever went into it: control characters (a NUL from a hostile file
/// would cut it short, an escape sequence would reach the terminal) become \xNN, and a message longer than
/// kMaxMessage characters is cut there and says how long it was.
class Error : public std::runtime_error {
 public:
  static constexpr std::size_t kMaxMessage = 2000;
  explicit Error(const std::string& message);
  explicit Error(const char* message);
};

/// Throws tapegrad::Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tapegrad

TAPEGRAD_API_END
