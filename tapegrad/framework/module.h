#pragma once
/// The Module base class: parameters, buffers and child modules, registered by name.
#include <tapegrad/export.h>
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::detail {
/// The forward-signature trap: M declares a forward that one tensor can call (`Tensor forward(Tensor x)`, a
/// const one, one with defaulted extra arguments) but none that overrides Module::forward(const Tensor&). Such a
/// forward hides the virtual one instead of overriding it: `m->forward(x)` works, while Sequential, a parent's
/// forward through the base and `(*m)(x)` reach Module::forward, which has no computation. GCC 12's -Wall does
/// not warn (-Woverloaded-virtual would), so the places that take a module by its type refuse it at compile time.
template <class M>
concept HidesModuleForward = requires(M& module, Tensor& input) { module.forward(input); } &&
                             !requires { static_cast<Tensor (M::*)(const Tensor&)>(&M::forward); };

template <class M> consteval void check_forward_signature() {
  static_assert(!HidesModuleForward<M>,
                "this module's forward does not override Module::forward(const Tensor&): it hides it, so "
                "Sequential and (*module)(x) would not call it. Declare it `Tensor forward(const Tensor& input) "
                "override` (see docs/layers.md, 'The forward signature').");
}
/// A module holder (nn::ModuleHolder, module_holder.h): names its module type and hands out its shared handle.
template <class H>
concept ModuleHolderLike = requires(const H& holder) {
  typename H::ModuleType;
  { holder.ptr() } -> std::convertible_to<std::shared_ptr<typename H::ModuleType>>;
};
}  // namespace tapegrad::detail

namespace tapegrad::nn {

/// Name -> tensor pairs in registration order (dotted names for nested modules: "features.1.running_mean").
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// What load_state found besides the entries it loaded (non-strict mode reports instead of throwing).
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

/// Note: parameters are leaves that require grad and are what an optimizer sees. Buffers are state that
/// is never differentiated (a buffer can never require grad) and never seen by an optimizer, yet is part of
/// state() and so saved and loaded. Both are registered by name; every generic operation (parameters(),
/// train(), to(), state(), load_state(), zero_grad()) walks the registries, so a layer writes no code for them.
/// Modules are held by std::shared_ptr and are not copyable; clone() makes an independent deep copy. A module
/// can be moved while nobody holds it yet, which is what lets a layer be handed over by value, as in libtorch:
/// `register_module("fc", nn::Linear(4, 2))`, `nn::Sequential(nn::Linear(4, 8), nn::ReLU())`.
class Module {
 public:
  /// `type_name` is what printing shows ("Linear", "BatchNorm2d").
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Note: a layer's handles (its weight, its children) and the registries hold the same tensors and modules,
  /// so moving both keeps them in step. Move assignment stays deleted: it would replace a module that a parent
  /// or an optimizer may already hold.
  Module(Module&&) = default;
  Module& operator=(Module&&) = delete;

  /// The layer's computation for one input tensor. Layers override it; the base throws.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // ---- registration (names: non-empty, no '.', unique across parameters, buffers and children) ----
  /// Registers a parameter (a floating leaf); returns the handle the layer should keep.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  /// Registers a buffer; non-persistent buffers are not part of state().
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  /// Registers a child module; returns it.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    tapegrad::detail::check_forward_signature<M>();
    register_child(name, child);
    return child;
  }
  /// Registers a module given by value (`register_module("fc", nn::Linear(4, 2))`); returns the shared handle
  /// the parent keeps, with the module's own type.
  template <class M>
    requires std::derived_from<M, Module> && (!std::is_reference_v<M>)
  std::shared_ptr<M> register_module(const std::string& name, M&& child) {
    return register_module(name, std::make_shared<M>(std::move(child)));
  }

  /// Registers the module a holder holds (nn::ModuleHolder: `fc = register_module("fc", nn::Linear(3, 4))` with
  /// nn::holders' names); returns the holder.
  template <class H>
    requires tapegrad::detail::ModuleHolderLike<H>
  H register_module(const std::string& name, H child) {
    register_module(name, child.ptr());
    return child;
  }

  // ---- traversal (recursive, insertion order, dotted names) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// Puts `module` in place of the child registered under `name` (as libtorch's replace_module); returns it.
  /// Containers that also keep their own list (Sequential::replace) must go through their own method.
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> module);
  /// This module (name "") and every descendant, depth first, parents before children.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// Calls fn on this module and every descendant (parents first).
  void apply(const std::function<void(Module&)>& fn);
  /// The parameter, buffer or child registered under `name` on this module (not recursive); throws if absent.
  Tensor parameter(const std::string& name) const;
  Tensor buffer(const std::string& name) const;

  // ---- mode and housekeeping ----
  /// Sets training mode on this module and its children. Layers with extra rules (a frozen BatchNorm) override it.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Clears (set_to_none) or zeroes every parameter's .grad.
  void zero_grad(bool set_to_none = true);
  /// Converts parameters and floating buffers to `dtype` in place; integer buffers keep their dtype.
  void to(DType dtype);
  /// PyTorch's `model.to(memory_format=torch.channels_last)`: sets the format this module and its children run
  /// in. With ChannelsLast a Conv2d hands its weight to the op channels-last, so by PyTorch's rule its output and
  /// input gradient are channels-last whatever the input's format (and BatchNorm, ReLU, pooling keep that
  /// format); a weight with one input channel or a 1x1 kernel is both formats at once and changes nothing.
  /// Note: unlike PyTorch, the parameters stay row-major in storage (the op gets a differentiable channels-last
  /// copy of the small weight), so optimizers, state() and checkpoints see the same row-major values as before.
  /// Preserve is refused.
  void to(MemoryFormat format);
  /// The format set by to(MemoryFormat); Contiguous unless changed.
  MemoryFormat memory_format() const { return memory_format_; }
  /// An independent deep copy: parameters, buffers, requires_grad flags, training flag.
  virtual std::shared_ptr<Module> clone() const;

  // ---- state ----
  /// Every parameter and persistent buffer, by dotted name (detached handles sharing the values).
  NamedTensors state() const;
  /// The state-format version of each module, by dotted prefix ("" for this module).
  std::map<std::string, int> state_versions() const;
  /// Copies `entries` into the parameters and persistent buffers by name. Checks everything first, so a failed
  /// load leaves the module unchanged: missing keys, shape and dtype mismatches are errors naming the key;
  /// unexpected keys are an error when strict and reported otherwise. `versions` (from state_versions() at save
  /// time) lets a module upgrade an older layout; an empty map means current versions.
  LoadResult load_state(const NamedTensors& entries, bool strict = true, const std::map<std::string, int>& versions = {});

  // ---- printing ----
  const std::string& type_name() const { return type_name_; }
  /// The layer's options for printing, "in_features=784, out_features=10, bias=true".
  virtual std::string extra_repr() const { return ""; }
  /// PyTorch-style nested summary, plus parameter and buffer counts.
  std::string repr() const;
  /// Number of parameter elements (only those requiring grad when trainable_only).
  std::int64_t parameter_count(bool trainable_only = false) const;

 protected:
  /// Version of this module's own state layout; bump it when the layout changes.
  virtual int state_version() const { return 1; }
  /// Rewrites `state` entries under `prefix` saved at `from_version` into the current layout.
  virtual void upgrade_state(NamedTensors& state, const std::string& prefix, int from_version) const;
  /// Called on every module after load_state() has copied the values in, so a module can re-derive flags
  /// it keeps in a buffer (a frozen BatchNorm). The default does nothing.
  virtual void after_load_state() {}
  /// Copies every tensor, flag and child state of `source` into `fresh` (built with the same options); clone() uses it.
  std::shared_ptr<Module> clone_into(std::shared_ptr<Module> fresh) const;
  bool training_ = true;

 private:
  struct BufferEntry {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  void register_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  void collect_parameters(const std::string& prefix, NamedTensors& out, bool recurse) const;
  void collect_buffers(const std::string& prefix, NamedTensors& out, bool recurse, bool persistent_only) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out);
  std::string repr_body(int indent) const;

  std::string type_name_;
  MemoryFormat memory_format_ = MemoryFormat::Contiguous;
  NamedTensors parameters_;
  std::vector<BufferEntry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// operator<< prints repr().
std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace tapegrad::nn

TAPEGRAD_API_END
