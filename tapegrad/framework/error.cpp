// tapegrad::Error: every message printable and bounded, whatever bytes went into it.
#include <tapegrad/framework/error.h>

#include <algorithm>

namespace tapegrad {
namespace {

std::string printable_message(const std::string& message) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(message.size(), Error::kMaxMessage) + 40);
  std::size_t i = 0;
  for (; i < message.size() && out.size() < Error::kMaxMessage; ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);  // bytes >= 0x80 stay: paths and names may be UTF-8
    }
  }
  if (i < message.size()) {
    // Note: back up to the start of a UTF-8 sequence, so that the cut leaves no half character.
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xc0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xc0) out.pop_back();
    out += fmt::format("...(message cut: {} bytes in all)", message.size());
  }
  return out;
}

}  // namespace

Error::Error(const std::string& message) : std::runtime_error(printable_message(message)) {}
Error::Error(const char* message) : std::runtime_error(printable_message(message != nullptr ? message : "")) {}

}  // namespace tapegrad
