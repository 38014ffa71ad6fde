#pragma once
// Internal: a kernel path forced from the environment, so that one binary measures whole workloads on either path
// in the same run.
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <tapegrad/framework/error.h>

namespace tapegrad::kernels {

/// The path named by the environment variable `variable` among `choices` ({name, path} pairs), or `unset` when the
/// variable is unset or empty; any other value throws, naming the variable and the choices.
template <class Path>
Path path_from_environment(const char* variable, Path unset,
                           std::initializer_list<std::pair<std::string_view, Path>> choices) {
  const char* value = std::getenv(variable);
  const std::string_view name = value ? value : "";
  if (name.empty()) return unset;
  std::string names;
  for (const auto& [choice, path] : choices) {
    if (name == choice) return path;
    names += (names.empty() ? "" : " or ") + std::string(choice);
  }
  fail("{} must be {} (or unset), got '{}'", variable, names, name);
}

}  // namespace tapegrad::kernels
