#pragma once
/// nn::Sequential: children applied one after another, named "0", "1", ... in order.
#include <tapegrad/export.h>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

namespace detail {
/// What Sequential's variadic constructor takes: a module by value (moved in) or a shared handle to one.
template <class T>
concept SequentialElement =
    (std::derived_from<T, Module> && !std::is_reference_v<T>) ||
    requires(std::remove_cvref_t<T> pointer) { std::shared_ptr<Module>{pointer}; };

template <class T> std::shared_ptr<Module> to_shared_module(T&& element) {
  if constexpr (std::derived_from<std::remove_cvref_t<T>, Module>)
    tapegrad::detail::check_forward_signature<std::remove_cvref_t<T>>();
  else
    tapegrad::detail::check_forward_signature<typename std::remove_cvref_t<T>::element_type>();
  if constexpr (std::derived_from<std::remove_cvref_t<T>, Module>)
    return std::make_shared<std::remove_cvref_t<T>>(std::forward<T>(element));
  else
    return std::shared_ptr<Module>(std::forward<T>(element));
}
}  // namespace detail

/// A chain of modules; forward feeds each child's output to the next (an empty chain is the identity).
class Sequential : public Module {
 public:
  Sequential();
  /// `Sequential(Linear(784, 64), ReLU(), Linear(64, 10))` as in libtorch: layers by value (moved in) or as
  /// shared handles, mixed freely. Brace initialization works too: `Sequential seq{Linear(4, 8), ReLU()}`.
  template <class... Elements>
    requires(sizeof...(Elements) > 0 && (detail::SequentialElement<Elements> && ...))
  explicit Sequential(Elements&&... elements) : Sequential() {
    (append(detail::to_shared_module(std::forward<Elements>(elements))), ...);
  }
  /// `Sequential({a, b, c})` from shared handles.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  /// Appends a module under the next index name and returns it with its own type.
  template <class M> std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    tapegrad::detail::check_forward_signature<M>();
    append(module);
    return module;
  }
  /// Appends a module given by value (moved in, as libtorch's `push_back(Linear(4, 8))`); returns its handle.
  template <class M>
    requires std::derived_from<M, Module> && (!std::is_reference_v<M>)
  std::shared_ptr<M> push_back(M&& module) {
    return push_back(std::make_shared<M>(std::move(module)));
  }
  /// Appends the module a holder holds (nn::ModuleHolder, TAPEGRAD_MODULE); returns the holder.
  template <class H>
    requires tapegrad::detail::ModuleHolderLike<H>
  H push_back(H holder) {
    push_back(holder.ptr());
    return holder;
  }
  /// The i-th module; out of range is an error naming the size.
  std::shared_ptr<Module> at(std::size_t index) const;
  std::shared_ptr<Module> operator[](std::size_t index) const { return at(index); }
  /// The i-th module as type M; an error when it is of another type.
  template <class M> std::shared_ptr<M> at_as(std::size_t index) const {
    auto typed = std::dynamic_pointer_cast<M>(at(index));
    if (!typed) fail_wrong_type(index);
    return typed;
  }
  /// Puts `module` at position `index` (keeping the name "index"); returns the module it replaced.
  std::shared_ptr<Module> replace(std::size_t index, std::shared_ptr<Module> module);
  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  Tensor forward(const Tensor& input) override;
  /// Clones every child, so the copy shares nothing with this chain.
  std::shared_ptr<Module> clone() const override;

 private:
  void append(std::shared_ptr<Module> module);
  [[noreturn]] void fail_wrong_type(std::size_t index) const;
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace tapegrad::nn

TAPEGRAD_API_END
