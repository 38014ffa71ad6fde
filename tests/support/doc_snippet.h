#pragma once
// The check behind every compiled docs example: a page quotes its test file's code verbatim.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace tapegrad::testing {

/// Reads a file below the source tree, failing the test when it cannot be opened.
inline std::string read_source_file(const std::string& relative_path) {
  std::ifstream in(std::string(TAPEGRAD_SOURCE_DIR) + "/" + relative_path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Requires that `doc_path` contains, as a ```cpp block, the code between `// DOC-BEGIN` and `// DOC-END`
/// in `source_path` (both relative to the source tree).
inline void check_doc_quotes_snippet(const std::string& source_path, const std::string& doc_path) {
  const std::string source = read_source_file(source_path);
  const std::string doc = read_source_file(doc_path);
  const std::string begin_marker = "// DOC-BEGIN\n", end_marker = "// DOC-END";
  const auto begin = source.find(begin_marker), end = source.find(end_marker);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string snippet = source.substr(begin + begin_marker.size(), end - begin - begin_marker.size());
  INFO("paste the code between DOC-BEGIN and DOC-END of " << source_path << " into " << doc_path
                                                          << " as a ```cpp block");
  CHECK(doc.find("```cpp\n" + snippet + "```") != std::string::npos);
}

}  // namespace tapegrad::testing
