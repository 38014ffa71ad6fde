#include <tapegrad/framework/module.h>

#include <algorithm>
#include <ostream>
#include <set>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/printable.h>

namespace tapegrad::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor&) {
  // Note: reached by a module that defines no forward, or one whose forward hides this one instead of
  // overriding it (taken by value, const, extra defaulted arguments): say how to tell them apart.
  fail("{}: forward(const Tensor&) is not overridden. If the module has a forward of another signature (such as "
       "`Tensor forward(Tensor x)`), it hides Module::forward instead of overriding it: declare it "
       "`Tensor forward(const Tensor& input) override`",
       type_name_);
}

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty()) fail("{}: name must not be empty ({})", what, type_name_);
  if (name.find('.') != std::string::npos) fail("{}: name '{}' must not contain '.' ({})", what, name, type_name_);
  const bool taken =
      std::any_of(parameters_.begin(), parameters_.end(), [&](const auto& p) { return p.first == name; }) ||
      std::any_of(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.name == name; }) ||
      std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  if (taken) fail("{}: name '{}' is already registered on this {}", what, name, type_name_);
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  tensor.check_defined("register_parameter");
  if (!is_floating(tensor.dtype()))
    fail("register_parameter: '{}' is {}; parameters must be float32 or float64", name, dtype_name(tensor.dtype()));
  if (tensor.is_buffer()) fail("register_parameter: '{}' is already a buffer", name);
  if (!tensor.is_leaf()) tensor = tensor.detach();
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name, "register_buffer");
  tensor.check_defined("register_buffer");
  if (tensor.requires_grad()) tensor = tensor.detach();
  tensor.mark_as_buffer();
  buffers_.push_back({name, tensor, persistent});
  return tensor;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "register_module");
  if (!child) fail("register_module: '{}' is null", name);
  children_.emplace_back(name, std::move(child));
}

// ---- traversal ----
void Module::collect_parameters(const std::string& prefix, NamedTensors& out, bool recurse) const {
  for (const auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor);
  if (recurse)
    for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out, true);
}

void Module::collect_buffers(const std::string& prefix, NamedTensors& out, bool recurse, bool persistent_only) const {
  for (const auto& entry : buffers_)
    if (entry.persistent || !persistent_only) out.emplace_back(prefix + entry.name, entry.tensor);
  if (recurse)
    for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out, true, persistent_only);
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_) child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect_parameters("", out, recurse);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters(recurse)) out.push_back(tensor);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect_buffers("", out, recurse, false);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_buffers(recurse)) out.push_back(tensor);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::shared_ptr<Module> Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  if (!module) fail("replace_module: the replacement for '{}' is null ({})", name, type_name_);
  for (auto& [child_name, child] : children_)
    if (child_name == name) return child = std::move(module);
  fail("replace_module: {} has no child named '{}'", type_name_, name);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, module] : named_modules()) fn(*module);
}

Tensor Module::parameter(const std::string& name) const {
  for (const auto& [n, t] : parameters_)
    if (n == name) return t;
  fail("{}: no parameter named '{}'", type_name_, name);
}

Tensor Module::buffer(const std::string& name) const {
  for (const auto& entry : buffers_)
    if (entry.name == name) return entry.tensor;
  fail("{}: no buffer named '{}'", type_name_, name);
}

// ---- mode and housekeeping ----
void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      p.grad().zero_();
  }
}

void Module::to(DType dtype) {
  if (!is_floating(dtype)) fail("{}.to: modules can only be converted to float32 or float64", type_name_);
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) p.set_data(p.detach().to(dtype));
  for (auto& [name, b] : named_buffers())
    if (is_floating(b.dtype())) b.set_data(b.detach().to(dtype));
}

void Module::to(MemoryFormat format) {
  if (format == MemoryFormat::Preserve)
    fail("{}.to: a module's memory format is Contiguous or ChannelsLast, not Preserve", type_name_);
  memory_format_ = format;
  for (auto& [name, child] : children_) child->to(format);
}

std::shared_ptr<Module> Module::clone() const {
  fail("{}: clone() is not implemented for this module type", type_name_);
}

std::shared_ptr<Module> Module::clone_into(std::shared_ptr<Module> fresh) const {
  NoGradGuard no_grad;
  auto copy_tensors = [&](const NamedTensors& from, const NamedTensors& to, const char* kind) {
    if (from.size() != to.size())
      fail("clone: {} has {} {}s but its fresh copy has {}", type_name_, from.size(), kind, to.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (from[i].first != to[i].first)
        fail("clone: {} '{}' of {} has no counterpart in the fresh copy", kind, from[i].first, type_name_);
      Tensor dst = to[i].second;
      dst.set_data(from[i].second.detach().clone());
      if (from[i].second.requires_grad() != dst.requires_grad()) dst.requires_grad_(from[i].second.requires_grad());
    }
  };
  copy_tensors(named_parameters(), fresh->named_parameters(), "parameter");
  NamedTensors from_buffers, to_buffers;
  collect_buffers("", from_buffers, true, false);
  fresh->collect_buffers("", to_buffers, true, false);
  copy_tensors(from_buffers, to_buffers, "buffer");
  auto from_modules = const_cast<Module*>(this)->named_modules();
  auto to_modules = fresh->named_modules();
  if (from_modules.size() != to_modules.size()) fail("clone: {} and its fresh copy differ in submodules", type_name_);
  for (std::size_t i = 0; i < from_modules.size(); ++i) {
    to_modules[i].second->training_ = from_modules[i].second->training_;
    to_modules[i].second->memory_format_ = from_modules[i].second->memory_format_;
  }
  return fresh;
}

// ---- state ----
NamedTensors Module::state() const {
  NamedTensors out;
  for (auto& [name, p] : named_parameters()) out.emplace_back(name, p.detach());
  NamedTensors persistent;
  collect_buffers("", persistent, true, true);
  for (auto& [name, b] : persistent) out.emplace_back(name, b.detach());
  return out;
}

std::map<std::string, int> Module::state_versions() const {
  std::map<std::string, int> out;
  for (auto& [prefix, module] : const_cast<Module*>(this)->named_modules()) out[prefix] = module->state_version();
  return out;
}

void Module::upgrade_state(NamedTensors&, const std::string&, int) const {}

namespace {
// Names for a message: each escaped (a file's keys may hold any bytes), at most 20 of them, then how many more.
template <class Names>
std::string name_list(const Names& names) {
  std::string out;
  std::size_t shown = 0;
  for (const std::string& name : names) {
    if (shown == 20) return out + fmt::format(", ... ({} more)", names.size() - shown);
    out += (shown++ > 0 ? ", " : "") + detail::printable(name);
  }
  return out;
}
}  // namespace

LoadResult Module::load_state(const NamedTensors& entries, bool strict, const std::map<std::string, int>& versions) {
  NamedTensors incoming = entries;
  if (!versions.empty()) {
    for (auto& [prefix, module] : named_modules()) {
      auto it = versions.find(prefix);
      if (it == versions.end()) continue;
      const std::string label = prefix.empty() ? std::string("<root>") : prefix;
      if (it->second > module->state_version()) {
        // Note: a file holds no module types, only state versions by prefix. A newer version is the likely
        // story only when the entries there are the ones this module has; otherwise the file holds a different
        // module at this prefix, and saying "newer" would send the user looking for an upgrade.
        const std::string dotted = prefix.empty() ? "" : prefix + ".";
        std::set<std::string> here, there;
        for (const auto& [name, tensor] : module->state()) here.insert(dotted + name);
        for (const auto& [name, tensor] : incoming)
          if (name.compare(0, dotted.size(), dotted) == 0) there.insert(name);
        if (here != there)
          fail("load_state: the checkpoint's entries under {} ({}) do not match this model's {} there ({}): the file "
               "holds a different module or architecture at this prefix",
               label, name_list(there), module->type_name(), name_list(here));
        fail("load_state: {} ({}) was saved with state version {}, newer than this build's {}", label,
             module->type_name(), it->second, module->state_version());
      }
      if (it->second < module->state_version())
        module->upgrade_state(incoming, prefix.empty() ? "" : prefix + ".", it->second);
    }
  }
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < incoming.size(); ++i)
    if (!by_name.emplace(incoming[i].first, i).second) fail("load_state: key '{}' appears twice", detail::printable(incoming[i].first));

  const NamedTensors expected = state();
  LoadResult result;
  std::set<std::string> expected_names;
  for (const auto& [name, tensor] : expected) {
    expected_names.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      result.missing_keys.push_back(name);
      continue;
    }
    const Tensor& source = incoming[it->second].second;
    source.check_defined("load_state");
    if (source.shape() != tensor.shape())
      fail("load_state: size mismatch for {}: checkpoint {}, model {}", name, shape_string(source.shape()),
           shape_string(tensor.shape()));
    if (source.dtype() != tensor.dtype())
      fail("load_state: dtype mismatch for {}: checkpoint {}, model {}", name, dtype_name(source.dtype()),
           dtype_name(tensor.dtype()));
  }
  for (const auto& [name, tensor] : incoming)
    if (!expected_names.count(name)) result.unexpected_keys.push_back(name);
  if (strict && !result.missing_keys.empty())
    fail("load_state: missing key{} {}", result.missing_keys.size() > 1 ? "s" : "", name_list(result.missing_keys));
  if (strict && !result.unexpected_keys.empty())
    fail("load_state: unexpected key{} {}", result.unexpected_keys.size() > 1 ? "s" : "",
         name_list(result.unexpected_keys));

  NoGradGuard no_grad;
  for (const auto& [name, tensor] : expected) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    Tensor target = tensor;  // a detached handle sharing the module's storage
    target.copy_(incoming[it->second].second);
  }
  for (auto& [prefix, module] : named_modules()) module->after_load_state();
  return result;
}

// ---- printing ----
std::string Module::repr_body(int indent) const {
  std::string out = type_name_ + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [name, child] : children_)
      out += std::string(static_cast<std::size_t>(indent + 2), ' ') + "(" + name + "): " + child->repr_body(indent + 2) +
             "\n";
    out += std::string(static_cast<std::size_t>(indent), ' ');
  }
  return out + ")";
}

std::int64_t Module::parameter_count(bool trainable_only) const {
  std::int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

std::string Module::repr() const {
  const NamedTensors all_buffers = named_buffers();
  std::int64_t buffer_elements = 0;
  for (const auto& [name, b] : all_buffers) buffer_elements += b.numel();
  return fmt::format("{}\nparameters: {} ({} trainable), buffers: {} tensors ({} elements)", repr_body(0),
                     parameter_count(), parameter_count(true), all_buffers.size(), buffer_elements);
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.repr(); }

}  // namespace tapegrad::nn
