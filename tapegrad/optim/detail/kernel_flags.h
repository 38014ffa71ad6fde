#pragma once
// Internal: turns runtime flags into compile-time ones, so an optimizer kernel's inner loop has no branches
// and vectorises (one instantiation per combination).
#include <type_traits>
#include <utility>

namespace tapegrad::optim::detail {

/// Calls f(std::bool_constant<flag>{}...) for the given runtime flags.
template <class F>
void with_flags(F&& f) {
  f();
}
template <class F, class... Rest>
void with_flags(F&& f, bool flag, Rest... rest) {
  if (flag)
    with_flags([&](auto... known) { f(std::true_type{}, known...); }, rest...);
  else
    with_flags([&](auto... known) { f(std::false_type{}, known...); }, rest...);
}

}  // namespace tapegrad::optim::detail
