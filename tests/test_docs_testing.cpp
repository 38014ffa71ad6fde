// docs/testing.md: its example (tests/consumer_testing/power_norm_test.cpp, which .ci/run also builds against
// the installed package) runs in the suite too, and the page must quote it verbatim.
#include "consumer_testing/power_norm_test.cpp"
#include "support/doc_snippet.h"

TEST_CASE("docs/testing.md contains the example and the broken layer verbatim") {
  tapegrad::testing::check_doc_quotes_snippet("tests/consumer_testing/power_norm_test.cpp", "docs/testing.md");
  tapegrad::testing::check_doc_quotes_snippet("tests/consumer_testing/power_norm_test.cpp", "docs/testing.md",
                                              "broken");
}
