// docs/testing.md: its example (tests/consumer_testing/power_norm_test.cpp, which .ci/run also builds against
// the installed package) runs in the suite too, and the page must quote it verbatim.
#include "consumer_testing/power_norm_test.cpp"
#include "support/doc_snippet.h"

TEST_CASE("docs/testing.md contains the example and the broken layer verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/consumer_testing/power_norm_test.cpp", "docs/testing.md");
  tapegrad::testing::check_doc_quotes_snippet("tests/consumer_testing/power_norm_test.cpp", "docs/testing.md",
                                              "broken");
}

// Hidden (run only when asked for): the failure docs/testing.md shows under "What a failure looks like", produced by
//   build/release/tests/test_docs_testing "[failure-demo]"
// It is meant to fail; the suite does not run it.
TEST_CASE("InvertedPowerNorm keeps every rule", "[.][failure-demo]") {
  using namespace tapegrad;
  const testing::ModuleFactory make = [] { return std::make_shared<InvertedPowerNorm>(3); };
  testing::check_buffer_invariance(make, rc::gen::just(Shape{4, 3}),
                                   {.statistics = {"running_power"}, .momentum = [](const nn::Module&) { return 0.1; }});
}
