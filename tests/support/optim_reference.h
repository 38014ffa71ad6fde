#pragma once
// Readers of the PyTorch reference files in tests/data (`key values...` lines), written by the scripts in
// tests/reference: optim_reference.txt (test_optim, test_optim_options, test_lr_scheduler), large_logit_reference.txt
// (test_loss_numerics).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapegrad::testing {

/// Every entry of tests/data/<file> (`key values...` lines, '#' comments), read once per file.
inline const std::map<std::string, std::vector<double>>& reference_table(const std::string& file) {
  static std::map<std::string, std::map<std::string, std::vector<double>>> tables;
  const auto cached = tables.find(file);
  if (cached != tables.end()) return cached->second;
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(std::string(TAPEGRAD_TEST_DATA_DIR) + "/" + file);
  if (!in) throw std::runtime_error("cannot open " + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, token;
    fields >> key;
    std::vector<double>& values = out[key];
    while (fields >> token) values.push_back(std::stod(token));
  }
  return tables.emplace(file, std::move(out)).first->second;
}

/// Every entry of optim_reference.txt.
inline const std::map<std::string, std::vector<double>>& optim_reference() {
  return reference_table("optim_reference.txt");
}

/// The values under `key` in tests/data/<file>; a missing key fails the test that asked for it.
inline const std::vector<double>& reference_values(const std::string& key,
                                                   const std::string& file = "optim_reference.txt") {
  const auto& table = reference_table(file);
  const auto found = table.find(key);
  if (found == table.end()) FAIL("reference entry " << key << " is missing from " << file);
  return found->second;
}

}  // namespace tapegrad::testing
