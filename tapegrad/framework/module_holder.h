#pragma once
/// nn::ModuleHolder<M> and TAPEGRAD_MODULE: libtorch's module holders, for code written in their shape
/// (`nn::Linear fc{nullptr};`, `fc = register_module("fc", nn::Linear(3, 4));`, `fc->weight`, `fc(x)`).
#include <tapegrad/export.h>
#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include <tapegrad/framework/error.h>
#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// A shared handle to a module of type M with libtorch's ModuleHolder interface. Copies share the module.
/// Note: tapegrad's own layers are the module classes themselves (`std::make_shared<nn::Linear>(3, 4)`), so
/// holders are an addition, not a replacement: nn::holders names one for every built-in layer, and
/// TAPEGRAD_MODULE(Name) gives a user's NameImpl its holder Name. A holder converts to std::shared_ptr<M> (and
/// to a shared_ptr of any base), so it goes wherever a shared handle goes.
template <class M>
class ModuleHolder {
  static_assert(std::derived_from<M, Module>, "ModuleHolder<M>: M must derive from nn::Module");

 public:
  using ModuleType = M;
  using element_type = M;

  /// As libtorch: a default-built holder builds its module when M has a default constructor (so a member
  /// `nn::ReLU relu;` is never null by accident); without one, write `{nullptr}` for the empty state.
  ModuleHolder()
    requires std::default_initializable<M>
      : module_(std::make_shared<M>()) {}
  /// The empty state, to be assigned later (`fc = register_module("fc", nn::Linear(3, 4))`).
  ModuleHolder(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): libtorch's `Linear fc{nullptr}`
  /// Holds an existing module (or one of a derived type).
  template <class D>
    requires std::derived_from<D, M>
  ModuleHolder(std::shared_ptr<D> module) : module_(std::move(module)) {}  // NOLINT: as libtorch
  /// Builds the module from M's constructor arguments: `nn::Linear(3, 4)`, `nn::Conv2d(options)`.
  template <class First, class... Rest>
    requires(!std::same_as<std::remove_cvref_t<First>, std::nullptr_t> &&
             !std::derived_from<std::remove_cvref_t<First>, ModuleHolder> &&
             !std::is_same_v<std::remove_cvref_t<First>, std::shared_ptr<M>> &&
             std::constructible_from<M, First, Rest...>)
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : module_(std::make_shared<M>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  M* operator->() const { return get(); }
  M& operator*() const { return *get(); }
  /// The module; an error naming the cause when the holder is empty.
  M* get() const {
    if (!module_)
      fail("ModuleHolder: the holder is empty (built with nullptr and never assigned a module); assign it one, "
           "e.g. `fc = register_module(\"fc\", nn::Linear(3, 4))`");
    return module_.get();
  }
  const std::shared_ptr<M>& ptr() const { return module_; }
  bool is_empty() const { return module_ == nullptr; }
  explicit operator bool() const { return module_ != nullptr; }
  /// Calls the module's forward with whatever it takes, as libtorch's holder does.
  template <class... Args> decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
  template <class B>
    requires std::derived_from<M, B>
  operator std::shared_ptr<B>() const {  // NOLINT(google-explicit-constructor): goes where a handle goes
    return module_;
  }

 private:
  std::shared_ptr<M> module_;
};

}  // namespace tapegrad::nn

/// Declares `Name`, the holder of a user's module class `NameImpl`, as libtorch's TORCH_MODULE(Name).
#define TAPEGRAD_MODULE(Name)                                        \
  class Name : public ::tapegrad::nn::ModuleHolder<Name##Impl> {     \
   public:                                                           \
    using ::tapegrad::nn::ModuleHolder<Name##Impl>::ModuleHolder;    \
    using Impl = Name##Impl;                                         \
  }

TAPEGRAD_API_END
