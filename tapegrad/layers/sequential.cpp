#include <tapegrad/layers/sequential.h>

#include <string>

namespace tapegrad::nn {

Sequential::Sequential() : Module("Sequential") {}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Sequential() {
  for (const auto& module : modules) append(module);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) : Sequential() {
  for (const auto& module : modules) append(module);
}

void Sequential::append(std::shared_ptr<Module> module) {
  if (!module) fail("Sequential: cannot append a null module at index {}", modules_.size());
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

std::shared_ptr<Module> Sequential::at(std::size_t index) const {
  if (index >= modules_.size())
    fail("Sequential: index {} is out of range for a Sequential of size {}", index, modules_.size());
  return modules_[index];
}

std::shared_ptr<Module> Sequential::replace(std::size_t index, std::shared_ptr<Module> module) {
  std::shared_ptr<Module> old = at(index);
  if (!module) fail("Sequential: cannot put a null module at index {}", index);
  replace_module(std::to_string(index), module);
  modules_[index] = std::move(module);
  return old;
}

void Sequential::fail_wrong_type(std::size_t index) const {
  fail("Sequential: module {} is a {}, not the requested type", index, modules_[index]->type_name());
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& module : modules_) x = module->forward(x);
  return x;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& module : modules_) copy->append(module->clone());
  // Note: each child's clone already carries its own training flag; only this module's flag is left to copy.
  copy->training_ = training_;
  return copy;
}

}  // namespace tapegrad::nn
