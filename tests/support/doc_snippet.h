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
/// in `source_path` (both relative to the source tree). With a `name`, the markers are
/// `// DOC-BEGIN <name>` and `// DOC-END <name>`, so one test file can feed several blocks of a page.
inline void check_doc_quotes_snippet(const std::string& source_path, const std::string& doc_path,
                                     const std::string& name = "") {
  const std::string source = read_source_file(source_path);
  const std::string doc = read_source_file(doc_path);
  const std::string suffix = name.empty() ? "" : " " + name;
  const std::string begin_marker = "// DOC-BEGIN" + suffix + "\n", end_marker = "// DOC-END" + suffix + "\n";
  const auto begin = source.find(begin_marker);
  REQUIRE(begin != std::string::npos);
  const auto end = source.find(end_marker, begin);
  REQUIRE(end != std::string::npos);
  const std::string snippet = source.substr(begin + begin_marker.size(), end - begin - begin_marker.size());
  INFO("paste the code between the DOC-BEGIN" << suffix << " and DOC-END" << suffix << " markers of "
                                              << source_path << " into " << doc_path << " as a ```cpp block");
  CHECK(doc.find("```cpp\n" + snippet + "```") != std::string::npos);
}

}  // namespace tapegrad::testing
