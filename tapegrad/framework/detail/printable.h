#pragma once
// Internal: bytes from an untrusted file, made safe to put into an error message.
#include <cstddef>
#include <string>
#include <string_view>

namespace tapegrad::detail {

/// `bytes` as printable ASCII: every byte outside 0x20..0x7e (and the backslash) becomes \xNN, so a NUL cannot
/// cut a message and no control character reaches a terminal or a log. Longer than `max_bytes` input bytes, it
/// is cut there and says how long it was: "abc...(1048576 bytes)".
/// Note: for strings read from a file (keys, names, globals, dtypes); paths and the library's own words are not
/// escaped here (tapegrad::Error's constructor still replaces control characters in the whole message).
inline std::string printable(std::string_view bytes, std::size_t max_bytes = 80) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const std::size_t shown = bytes.size() > max_bytes ? max_bytes : bytes.size();
  out.reserve(shown + 24);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (shown < bytes.size()) out += "...(" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

}  // namespace tapegrad::detail
