#pragma once
// tests/data/optim_reference.txt, written by tests/reference/make_optim_reference.py: `key values...` lines,
// the PyTorch trajectories that test_optim and test_lr_scheduler compare against.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapegrad::testing {

/// Every entry of the reference file, read once.
inline const std::map<std::string, std::vector<double>>& optim_reference() {
  static const auto table = [] {
    std::map<std::string, std::vector<double>> out;
    std::ifstream in(std::string(TAPEGRAD_TEST_DATA_DIR) + "/optim_reference.txt");
    if (!in) throw std::runtime_error("cannot open optim_reference.txt");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string key, token;
      fields >> key;
      std::vector<double>& values = out[key];
      while (fields >> token) values.push_back(std::stod(token));
    }
    return out;
  }();
  return table;
}

/// The values under `key`; a missing key fails the test that asked for it.
inline const std::vector<double>& reference_values(const std::string& key) {
  const auto found = optim_reference().find(key);
  if (found == optim_reference().end()) FAIL("reference entry " << key << " is missing");
  return found->second;
}

}  // namespace tapegrad::testing
