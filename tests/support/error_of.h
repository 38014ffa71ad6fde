#pragma once
// The message of the tapegrad::Error a call throws, for tests that check several parts of one message.
#include <functional>
#include <string>

#include <tapegrad/framework/error.h>

namespace tapegrad::testing {

/// What `f` throws as a tapegrad::Error, or "<no error>" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace tapegrad::testing
