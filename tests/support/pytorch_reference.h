#pragma once
// Reads the PyTorch reference files that tests/reference/*.py write: one entry per line, `key shape values...`
// (shape comma-separated, "-" for a 0-dim scalar; values round-trip exact doubles), lines starting with '#' skipped.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tapegrad::testing {

/// Every entry of tests/data/<file_name>, as float64 tensors by key; fails when the file cannot be opened.
inline std::map<std::string, Tensor> load_pytorch_reference(const std::string& file_name) {
  const std::string path = std::string(TAPEGRAD_TEST_DATA_DIR) + "/" + file_name;
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  std::map<std::string, Tensor> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape_text, token;
    fields >> key >> shape_text;
    Shape shape;
    if (shape_text != "-") {
      std::istringstream dims(shape_text);
      while (std::getline(dims, token, ',')) shape.push_back(std::stoll(token));
    }
    std::vector<double> values;
    while (fields >> token) values.push_back(std::strtod(token.c_str(), nullptr));
    entries[key] = from_vector(values, shape, TensorOptions{}.with_dtype(DType::Float64));
  }
  return entries;
}

}  // namespace tapegrad::testing
