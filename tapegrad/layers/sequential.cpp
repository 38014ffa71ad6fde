// Sequential: children in order, and the one fusion it makes (a BatchNorm layer directly followed by a ReLU).
#include <tapegrad/layers/sequential.h>

#include <string>
#include <typeinfo>

#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/layers/activation.h>
#include <tapegrad/layers/batch_norm.h>

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

namespace {

// A BatchNorm layer whose next layer is a ReLU: Sequential runs the two as one op. Note: exact types only, so
// that a subclass with its own forward() is always called.
BatchNormBase* batch_norm_before_relu(Module& module, const Module& next) {
  const std::type_info& type = typeid(module);
  const bool batch_norm = type == typeid(BatchNorm1d) || type == typeid(BatchNorm2d) || type == typeid(BatchNorm3d);
  return batch_norm && typeid(next) == typeid(ReLU) ? static_cast<BatchNormBase*>(&module) : nullptr;
}

}  // namespace

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (std::size_t i = 0; i < modules_.size(); ++i) {
    trace::ModuleScope scope(*modules_[i]);  // while exporting: which layer each op ran in (for its errors)
    if (i + 1 < modules_.size()) {
      if (BatchNormBase* batch_norm = batch_norm_before_relu(*modules_[i], *modules_[i + 1])) {
        x = batch_norm->forward_then_relu(x);
        ++i;
        continue;
      }
    }
    x = modules_[i]->forward(x);
  }
  return x;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& module : modules_) copy->append(module->clone());
  // Note: each child's clone already carries its own training flag; only this module's flag is left to copy.
  copy->training_ = training_;
  if (memory_format() != MemoryFormat::Contiguous) copy->to(memory_format());  // set by to(MemoryFormat)
  return copy;
}

}  // namespace tapegrad::nn
