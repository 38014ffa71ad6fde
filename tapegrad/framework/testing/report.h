#pragma once
/// How the kit's properties fail: RapidCheck's labelled counterexample and the check's message, reported at the
/// line of the user's test that called the check, naming its TEST_CASE, and ending with the RC_PARAMS value
/// (and the command) that replays exactly that case.
#include <rapidcheck.h>  // also rc::detail::configuration, TestParams and the result types used below
#include <catch2/catch.hpp>

#include <source_location>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace tapegrad::testing::internal {

/// `name` as a Catch2 command-line filter: the characters it reads as syntax escaped.
inline std::string catch_filter(const std::string& name) {
  std::string out;
  for (const char c : name) {
    if (c == ',' || c == '[' || c == ']' || c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

/// `RC_PARAMS="seed=..." ./binary "test case" -c "property"`: what reruns one property on the same cases.
/// Note: each property draws its cases from the configured seed alone, so that seed replays its search and
/// shrinking. RapidCheck's own reproduce= value (printed at exit) is exact but too long for Catch2 to print
/// without breaking it across lines.
inline std::string replay_command(const std::string& property) {
  const std::string binary = Catch::getCurrentContext().getConfig()->name();
  return fmt::format("RC_PARAMS=\"seed={}\" {} \"{}\" -c \"{}\"", rc::detail::configuration().testParams.seed,
                     binary.empty() ? "<test binary>" : binary,
                     catch_filter(Catch::getResultCapture().getCurrentTestName()), catch_filter(property));
}

/// Fails the current RapidCheck case with `message` alone (RC_FAIL would add the kit's own file and line).
[[noreturn]] inline void fail_case(std::string message) {
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, std::move(message));
}

/// A RapidCheck property as a Catch2 section (as rc::prop does), whose failure is reported at `where` (the
/// user's call of the check), names the TEST_CASE, and ends with the command that replays it. A positive
/// `max_cases` caps the number of cases (RC_PARAMS' max_success still lowers it).
template <class Testable>
void property(const std::string& name, const std::source_location& where, Testable&& testable, int max_cases = 0) {
  SECTION(name) {
    const std::string test = Catch::getResultCapture().getCurrentTestName();
    // Note: the id keys RapidCheck's reproduce entries, so it names the TEST_CASE too (a label is unique only there).
    const rc::detail::TestMetadata metadata{test + " / " + name, name};
    rc::detail::TestParams params = rc::detail::configuration().testParams;
    if (max_cases > 0 && params.maxSuccess > max_cases) params.maxSuccess = max_cases;
    const auto result = params.maxSuccess == rc::detail::configuration().testParams.maxSuccess
                            ? rc::detail::checkTestable(std::forward<Testable>(testable), metadata)
                            : rc::detail::checkTestable(std::forward<Testable>(testable), metadata, params);
    if (result.template is<rc::detail::SuccessResult>()) {
      SUCCEED();
    } else {
      std::ostringstream out;
      rc::detail::printResultMessage(result, out);
      out << fmt::format("\n\nproperty \"{}\" of TEST_CASE \"{}\", checked at {}:{}", name, test, where.file_name(),
                         where.line());
      out << "\nreplay: " << replay_command(name);
      Catch::AssertionHandler handler("FAIL", Catch::SourceLineInfo(where.file_name(), where.line()),
                                      Catch::StringRef(), Catch::ResultDisposition::Normal);
      handler.handleMessage(Catch::ResultWas::ExplicitFailure, out.str());
      handler.complete();
    }
  }
}

}  // namespace tapegrad::testing::internal
