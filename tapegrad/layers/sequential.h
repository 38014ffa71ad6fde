#pragma once
/// nn::Sequential: children applied one after another, named "0", "1", ... in order.
#include <tapegrad/export.h>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// A chain of modules; forward feeds each child's output to the next (an empty chain is the identity).
class Sequential : public Module {
 public:
  Sequential();
  /// `Sequential({std::make_shared<Linear>(784, 10), std::make_shared<ReLU>()})`.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  /// Appends a module under the next index name and returns it with its own type.
  template <class M> std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    append(module);
    return module;
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
