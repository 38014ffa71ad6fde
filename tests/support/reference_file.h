#pragma once
// Reads the PyTorch reference files of tests/data (`key shape values...` per line, written by the scripts in
// tests/reference) into float64 tensors by key.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/framework/tensor.h>

namespace tapegrad::testing {

inline std::map<std::string, Tensor> load_reference_file(const std::string& file_name) {
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

/// The entry `key`; throws naming the key when the file has none.
inline const Tensor& reference_entry(const std::map<std::string, Tensor>& ref, const std::string& key) {
  const auto found = ref.find(key);
  if (found == ref.end()) fail("reference file: no entry '{}'", key);
  return found->second;
}

}  // namespace tapegrad::testing
