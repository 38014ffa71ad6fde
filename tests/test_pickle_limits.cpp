// The pickle interpreter's caps (serialize/detail/pickle.h): each limit is reached on its own, by a pickle that
// stays within every other one, and refused with a message that names the limit and the byte offset.
#include <catch2/catch.hpp>

#include <string>

#include <tapegrad/framework/serialize/detail/pickle.h>

#include "support/error_of.h"

using namespace tapegrad;
using tapegrad::testing::error_of;
using namespace std::string_literals;

namespace {

std::string long_binput(std::uint32_t index) {
  std::string out = "r";
  for (int b = 0; b < 4; ++b) out += static_cast<char>((index >> (8 * b)) & 0xff);
  return out;
}

}  // namespace

TEST_CASE("pickle: more values than kMaxObjects are refused, with a stack of two") {
  std::string p = "\x80\x02]";  // PROTO 2, EMPTY_LIST
  for (std::size_t i = 0; i < pickle::kMaxObjects; ++i) p += ")a";  // EMPTY_TUPLE, APPEND: one value each
  p += ".";
  const std::string message = error_of([&] { pickle::unpickle(p, "values.pkl"); });
  CHECK_THAT(message, Catch::Contains("values.pkl: data.pkl at byte"));
  CHECK_THAT(message, Catch::Contains("more than 2097152 values"));
}

TEST_CASE("pickle: more container slots than kMaxSlots are refused, with one value repeated") {
  // Note: std::string literals, so that the NUL bytes (memo index 0) are kept.
  std::string p = "\x80\x02)q\x00]"s;  // a tuple memoized as 0, then the list
  for (std::size_t i = 0; i <= pickle::kMaxSlots; ++i) p += "h\x00" "a"s;  // BINGET 0, APPEND: a slot, no value
  p += ".";
  const std::string message = error_of([&] { pickle::unpickle(p, "slots.pkl"); });
  CHECK_THAT(message, Catch::Contains("more than 8388608 tuple, list and dict slots"));
}

TEST_CASE("pickle: more memo entries than kMaxMemo are refused, with one value stored under many indices") {
  std::string p = "\x80\x02)";
  for (std::uint32_t i = 0; i <= pickle::kMaxMemo; ++i) p += long_binput(i);
  p += ".";
  const std::string message = error_of([&] { pickle::unpickle(p, "memo.pkl"); });
  CHECK_THAT(message, Catch::Contains("more than 2097152 memo entries"));
}

TEST_CASE("pickle: a deeper stack than kMaxStack is refused") {
  std::string p = "\x80\x02";
  for (std::size_t i = 0; i <= pickle::kMaxStack; ++i) p += "N";
  p += ".";
  CHECK_THAT(error_of([&] { pickle::unpickle(p, "stack.pkl"); }), Catch::Contains("more than 100000 values on the stack"));
}
