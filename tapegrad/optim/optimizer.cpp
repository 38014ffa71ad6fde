#include <tapegrad/optim/optimizer.h>

#include <algorithm>
#include <set>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad::optim {

namespace {

// The dense NHWC buffer of a channels-last tensor, seen as the row-major [N, H, W, C] tensor on the same storage.
Tensor nhwc_view(const Tensor& t) {
  const Shape shape = tapegrad::detail::nhwc_shape(t.shape());
  return tapegrad::detail::make_view(t, shape, contiguous_strides(shape), t.storage_offset());
}

// The inverse: the [N, C, H, W] channels-last tensor over a row-major [N, H, W, C] one's storage.
Tensor nchw_view(const Tensor& nhwc, const Shape& shape) {
  return tapegrad::detail::make_view(nhwc, shape, tapegrad::detail::channels_last_strides(shape),
                                     nhwc.storage_offset());
}

}  // namespace

double ParamGroup::get(const std::string& name) const {
  const auto found = options.find(name);
  if (found == options.end()) {
    std::vector<std::string> names;
    for (const auto& [key, value] : options) names.push_back(key);
    fail("ParamGroup: no hyperparameter '{}' (the group has {})", name, fmt::join(names, ", "));
  }
  return found->second;
}

Optimizer::Optimizer(std::string name, Options defaults) : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::validate_group(const Options& options, std::size_t index) const {
  try {
    validate(options);
  } catch (const Error& error) {
    fail("{} (parameter group {})", error.what(), index);
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  const std::size_t index = groups_.size();
  if (group.params.empty()) fail("{}: parameter group {} is empty (optimizer got an empty parameter list)", name_, index);
  for (const auto& [key, value] : group.options) {
    if (defaults_.count(key) == 0) {
      std::vector<std::string> names;
      for (const auto& [known, unused] : defaults_) names.push_back(known);
      fail("{}: unknown hyperparameter '{}' in parameter group {} (known: {})", name_, key, index,
           fmt::join(names, ", "));
    }
  }
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& existing : groups_)
    for (const Tensor& p : existing.params) seen.insert(p.impl().get());
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    if (!p.defined()) fail("{}: parameter {} of group {} is undefined", name_, i, index);
    if (p.is_buffer())
      fail("{}: parameter {} of group {} (shape {}) is a module buffer; optimizers only see parameters", name_, i,
           index, shape_string(p.shape()));
    if (!is_floating(p.dtype()))
      fail("{}: parameter {} of group {} is {}; only float32 and float64 tensors can be optimized", name_, i, index,
           dtype_name(p.dtype()));
    if (!p.is_leaf()) fail("{}: parameter {} of group {} is not a leaf (can't optimize a non-leaf Tensor)", name_, i, index);
    if (!seen.insert(p.impl().get()).second)
      fail("{}: some parameters appear more than once (parameter {} of group {})", name_, i, index);
  }
  Options merged = defaults_;
  for (const auto& [key, value] : group.options) merged[key] = value;
  validate_group(merged, index);
  group.options = std::move(merged);
  state_.emplace_back(group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        // Note: as PyTorch, a grad that carries history (create_graph) is replaced by a detached zero tensor.
        Tensor plain = grad.detach();
        plain.zero_();
        p.set_grad(plain);
      }
    }
  }
}

void Optimizer::step() {
  // Validate every group first, so a bad hyperparameter set between steps changes nothing.
  for (std::size_t g = 0; g < groups_.size(); ++g) validate_group(groups_[g].options, g);
  NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    for (std::size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (grad.shape() != p.shape() || grad.dtype() != p.dtype())
        fail("{}: grad {} {} of parameter {} in group {} does not match the parameter {} {}", name_,
             shape_string(grad.shape()), dtype_name(grad.dtype()), i, g, shape_string(p.shape()), dtype_name(p.dtype()));
      ParamState& state = state_[g][i];
      for (const auto& [key, value] : state) {
        if (key == "step") continue;
        if (value.shape() != p.shape() || value.dtype() != p.dtype())
          fail("{}: state '{}' of parameter {} in group {} is {} {} but the parameter is now {} {}", name_, key, i, g,
               shape_string(value.shape()), dtype_name(value.dtype()), shape_string(p.shape()), dtype_name(p.dtype()));
      }
      if (p.dim() == 4 && tapegrad::detail::is_strictly_channels_last(p)) {
        // Note: every update is elementwise over the parameter's, the gradient's and the state's buffers, so a
        // channels-last parameter (PyTorch steps those too) is updated as the row-major [N, H, W, C] tensor on
        // its own storage, with its gradient and state laid out alike. The state stays channels-last (PyTorch's
        // zeros_like(p) keeps the format) and reads as the parameter's shape; one loaded row-major is converted.
        ParamState nhwc;
        for (const auto& [key, value] : state)
          nhwc[key] = value.dim() == 4 ? nhwc_view(value.contiguous(MemoryFormat::ChannelsLast)) : value;
        Tensor p_nhwc = nhwc_view(p);
        update(group, p_nhwc, nhwc_view(tapegrad::detail::channels_last_values(grad)), nhwc);
        for (const auto& [key, value] : nhwc) state[key] = value.dim() == 4 ? nchw_view(value, p.shape()) : value;
      } else {
        update(group, p, grad, state);
      }
      p.impl()->storage->bump_version();
    }
  }
}

Tensor& Optimizer::zeros_state(ParamState& state, const std::string& key, const Tensor& param) {
  auto found = state.find(key);
  if (found == state.end())
    found = state.emplace(key, zeros(param.shape(), TensorOptions{}.with_dtype(param.dtype()))).first;
  return found->second;
}

std::int64_t Optimizer::increment_step(ParamState& state) {
  auto found = state.find("step");
  if (found == state.end()) found = state.emplace("step", zeros({}, TensorOptions{}.with_dtype(DType::Int64))).first;
  return ++found->second.data<std::int64_t>()[0];
}

const Optimizer::ParamState& Optimizer::param_state(const Tensor& parameter, const char* caller) const {
  parameter.check_defined(caller);
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i)
      if (groups_[g].params[i].is_same(parameter)) return state_[g][i];
  fail("{}: the tensor {} {} is not a parameter of this {} optimizer", caller, shape_string(parameter.shape()),
       dtype_name(parameter.dtype()), name_);
}

Tensor Optimizer::state_entry(const ParamState& state, const std::string& key) {
  const auto found = state.find(key);
  return found == state.end() ? Tensor() : found->second;
}

// ---- state ----
namespace {

Tensor scalar_double(double value) { return scalar_tensor(value, DType::Float64); }
Tensor scalar_int(std::int64_t value) { return from_vector(std::vector<std::int64_t>{value}, Shape{}); }

bool is_scalar_of(const Tensor& t, DType dtype) { return t.defined() && t.dim() == 0 && t.dtype() == dtype; }

// "group12.param3.exp_avg" -> group 12, rest "param3.exp_avg". Returns false on any other form.
bool split_index(const std::string& text, const std::string& prefix, std::size_t& index, std::string& rest) {
  if (text.compare(0, prefix.size(), prefix) != 0) return false;
  std::size_t pos = prefix.size(), value = 0;
  const std::size_t digits_begin = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') value = value * 10 + (text[pos++] - '0');
  if (pos == digits_begin || pos >= text.size() || text[pos] != '.') return false;
  if (pos - digits_begin > 1 && text[digits_begin] == '0') return false;  // no leading zeros
  index = value;
  rest = text.substr(pos + 1);
  return !rest.empty();
}

}  // namespace

NamedTensors Optimizer::state() const {
  NoGradGuard no_grad;
  NamedTensors out;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = fmt::format("group{}.", g);
    for (const auto& [key, value] : groups_[g].options) out.emplace_back(prefix + key, scalar_double(value));
    out.emplace_back(prefix + "num_params", scalar_int(static_cast<std::int64_t>(groups_[g].params.size())));
    for (std::size_t i = 0; i < state_[g].size(); ++i)
      for (const auto& [key, value] : state_[g][i])
        out.emplace_back(fmt::format("{}param{}.{}", prefix, i, key), value.clone());
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& entries) {
  const auto required = required_state_keys();
  auto allowed = required;
  for (const auto& key : optional_state_keys()) allowed.push_back(key);
  const auto contains = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };

  // Parse and check everything into fresh containers; commit only at the end.
  std::vector<Options> options(groups_.size());
  std::vector<std::vector<ParamState>> state(groups_.size());
  std::vector<bool> seen_count(groups_.size(), false);
  std::set<std::string> names;
  for (std::size_t g = 0; g < groups_.size(); ++g) state[g].resize(groups_[g].params.size());
  for (const auto& [name, value] : entries) {
    if (!names.insert(name).second) fail("{}: load_state: entry '{}' appears twice", name_, name);
    std::size_t g = 0;
    std::string rest;
    if (!split_index(name, "group", g, rest))
      fail("{}: load_state: unexpected entry '{}' (expected names like group0.lr or group0.param1.step)", name_, name);
    if (g >= groups_.size())
      fail("{}: load_state: entry '{}' is for parameter group {}, but the optimizer has {} group(s)", name_, name, g,
           groups_.size());
    if (!value.defined()) fail("{}: load_state: entry '{}' is an undefined tensor", name_, name);
    std::size_t i = 0;
    std::string key;
    if (split_index(rest, "param", i, key)) {
      if (i >= groups_[g].params.size())
        fail("{}: load_state: entry '{}' is for parameter {}, but group {} has {} parameter(s)", name_, name, i, g,
             groups_[g].params.size());
      if (!contains(allowed, key))
        fail("{}: load_state: unexpected state '{}' in entry '{}' (known: {})", name_, key, name, fmt::join(allowed, ", "));
      const Tensor& p = groups_[g].params[i];
      if (key == "step") {
        if (!is_scalar_of(value, DType::Int64))
          fail("{}: load_state: entry '{}' must be a 0-dim int64 tensor, got {} {}", name_, name,
               shape_string(value.shape()), dtype_name(value.dtype()));
      } else if (value.shape() != p.shape() || value.dtype() != p.dtype()) {
        fail("{}: load_state: entry '{}' is {} {}, but the parameter is {} {}", name_, name, shape_string(value.shape()),
             dtype_name(value.dtype()), shape_string(p.shape()), dtype_name(p.dtype()));
      }
      state[g][i][key] = value.detach().clone();
    } else if (rest == "num_params") {
      if (!is_scalar_of(value, DType::Int64))
        fail("{}: load_state: entry '{}' must be a 0-dim int64 tensor", name_, name);
      if (value.item() != static_cast<double>(groups_[g].params.size()))
        fail("{}: load_state: saved parameter group {} has {} parameter(s), this optimizer's has {}", name_, g,
             static_cast<std::int64_t>(value.item()), groups_[g].params.size());
      seen_count[g] = true;
    } else {
      if (rest.find('.') != std::string::npos || rest.compare(0, 5, "param") == 0)
        fail("{}: load_state: unexpected entry '{}'", name_, name);
      if (!is_scalar_of(value, DType::Float64))
        fail("{}: load_state: hyperparameter entry '{}' must be a 0-dim float64 tensor, got {} {}", name_, name,
             shape_string(value.shape()), dtype_name(value.dtype()));
      options[g][rest] = value.item();
    }
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (!seen_count[g]) fail("{}: load_state: missing entry 'group{}.num_params'", name_, g);
    for (const auto& [key, unused] : defaults_)
      if (options[g].count(key) == 0) fail("{}: load_state: missing entry 'group{}.{}'", name_, g, key);
    validate_group(options[g], g);
    for (std::size_t i = 0; i < state[g].size(); ++i) {
      if (state[g][i].empty()) continue;
      for (const auto& key : required)
        if (state[g][i].count(key) == 0)
          fail("{}: load_state: missing entry 'group{}.param{}.{}' (the parameter has other state)", name_, g, i, key);
    }
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
}

}  // namespace tapegrad::optim
