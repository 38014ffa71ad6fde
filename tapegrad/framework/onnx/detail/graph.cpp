// The traced graph: values and nodes from the tracer's reports, the liveness pass, and the converters' context.
#include <tapegrad/framework/onnx/detail/graph.h>

#include <cstring>
#include <type_traits>

#include <tapegrad/framework/error.h>

namespace tapegrad::onnx::detail {

namespace {

const void* identity(const Tensor& t) { return t.impl().get(); }

std::string describe(const Shape& shape) { return shape_string(shape); }

// Whether two tensors hold the same values (NaN equal to NaN), compared as float64.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (a.dtype() == DType::Int64) {
    const Tensor x = a.contiguous(), y = b.contiguous();
    return a.numel() == 0 || std::memcmp(x.data<std::int64_t>(), y.data<std::int64_t>(),
                                         static_cast<std::size_t>(a.numel()) * sizeof(std::int64_t)) == 0;
  }
  const std::vector<double> x = a.to(DType::Float64).contiguous().to_vector();
  const std::vector<double> y = b.to(DType::Float64).contiguous().to_vector();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i] && !(x[i] != x[i] && y[i] != y[i])) return false;
  return true;
}

}  // namespace

Graph build_graph(const std::vector<Tensor>& inputs, const std::vector<trace::Event>& events,
                  const std::vector<Tensor>& outputs, const std::vector<Tensor>* inputs_b,
                  const std::vector<trace::Event>* events_b, const std::vector<Tensor>* outputs_b,
                  const nn::NamedTensors& named_state, const std::vector<trace::Event>* events_c,
                  const std::vector<Tensor>* outputs_c) {
  Graph graph;
  std::unordered_map<const void*, int> current;  // tensor -> its value now
  std::unordered_map<const void*, int> fixed;    // parameters and constants: one value each
  std::unordered_map<const void*, std::string> state_names;
  for (const auto& [name, tensor] : named_state)
    if (tensor.defined()) state_names.emplace(identity(tensor), name);

  auto add_value = [&](Value::Kind kind, const Tensor& t, const Tensor* t_b) {
    Value v;
    v.kind = kind;
    v.tensor = t;
    v.shape = t.shape();
    v.shape_b = t_b && t_b->defined() ? t_b->shape() : t.shape();
    v.dtype = t.dtype();
    graph.values.push_back(std::move(v));
    return static_cast<int>(graph.values.size()) - 1;
  };
  // The value a tensor read by an op stands for: what an earlier op made, an input, a parameter, or a constant.
  // t_c: the same tensor in the forward on other input values, kept with a constant for mark_live's check.
  auto resolve = [&](const Tensor& t, const Tensor* t_b, const std::string& op, const Tensor* t_c) -> int {
    if (!t.defined()) return -1;
    if (auto it = current.find(identity(t)); it != current.end()) return it->second;
    if (auto it = fixed.find(identity(t)); it != fixed.end()) return it->second;
    int id;
    if (auto it = state_names.find(identity(t)); it != state_names.end()) {
      id = add_value(Value::Kind::Parameter, t, nullptr);
      graph.values[static_cast<std::size_t>(id)].name = it->second;
    } else {
      id = add_value(Value::Kind::Constant, t, t_b);
      const Value& v = graph.values[static_cast<std::size_t>(id)];
      if (v.shape != v.shape_b)
        fail(
            "export_onnx: op '{}' reads a tensor made during the forward from no input, of shape {} (and {} when "
            "a dynamic axis changes): a constant whose shape depends on a dynamic axis cannot be exported; "
            "compute it from the input (e.g. zeros_like) or drop the dynamic axis",
            op, describe(v.shape), describe(v.shape_b));
      if (t_c) graph.values[static_cast<std::size_t>(id)].tensor_c = *t_c;
    }
    fixed.emplace(identity(t), id);
    return id;
  };

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const int id = add_value(Value::Kind::Input, inputs[i], inputs_b ? &(*inputs_b)[i] : nullptr);
    current[identity(inputs[i])] = id;
    graph.inputs.push_back(id);
  }
  if (events_b && events_b->size() != events.size())
    fail(
        "export_onnx: the forward ran {} ops, and {} when a dynamic axis changed: a graph that depends on the "
        "extent of a dynamic axis cannot be exported",
        events.size(), events_b->size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    const trace::Event& e = events[k];
    const trace::Event* eb = events_b ? &(*events_b)[k] : nullptr;
    const trace::Event* ec = events_c && events_c->size() == events.size() && (*events_c)[k].op == events[k].op &&
                                     (*events_c)[k].inputs.size() == events[k].inputs.size()
                                 ? &(*events_c)[k]
                                 : nullptr;
    if (eb && (eb->op != e.op || eb->inputs.size() != e.inputs.size() || eb->outputs.size() != e.outputs.size()))
      fail(
          "export_onnx: op {} of the forward was '{}', and '{}' when a dynamic axis changed: a graph that depends "
          "on the extent of a dynamic axis cannot be exported",
          k, e.op, eb->op);
    Node node;
    node.event = e;
    node.attributes_b = eb ? eb->attributes : e.attributes;
    for (std::size_t i = 0; i < e.inputs.size(); ++i)
      node.inputs.push_back(resolve(e.inputs[i], eb ? &eb->inputs[i] : nullptr, e.op, ec ? &ec->inputs[i] : nullptr));
    for (std::size_t a = 0; a < e.attributes.size(); ++a) {
      if (const Tensor* t = std::get_if<Tensor>(&e.attributes[a].value)) {
        const Tensor* tb = nullptr;
        if (eb && a < eb->attributes.size()) tb = std::get_if<Tensor>(&eb->attributes[a].value);
        const Tensor* tc = nullptr;
        if (ec && a < ec->attributes.size()) tc = std::get_if<Tensor>(&ec->attributes[a].value);
        node.tensor_attributes[e.attributes[a].name] = resolve(*t, tb, e.op, tc);
      }
    }
    for (std::size_t j = 0; j < e.outputs.size(); ++j) {
      if (!e.outputs[j].defined()) {
        node.outputs.push_back(-1);
        continue;
      }
      const int id = add_value(Value::Kind::Computed, e.outputs[j], eb ? &eb->outputs[j] : nullptr);
      graph.values[static_cast<std::size_t>(id)].producer = static_cast<int>(k);
      current[identity(e.outputs[j])] = id;
      fixed.erase(identity(e.outputs[j]));
      node.outputs.push_back(id);
    }
    graph.nodes.push_back(std::move(node));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor* tc = outputs_c && outputs_c->size() == outputs.size() ? &(*outputs_c)[i] : nullptr;
    const int id = resolve(outputs[i], outputs_b ? &(*outputs_b)[i] : nullptr, "the forward's output", tc);
    if (id < 0) fail("export_onnx: output {} of the forward is an undefined tensor", i);
    if (outputs_b) graph.values[static_cast<std::size_t>(id)].shape_b = (*outputs_b)[i].shape();
    graph.outputs.push_back(id);
  }
  return graph;
}

void mark_live(Graph& graph) {
  std::vector<bool> needed(graph.values.size(), false);
  std::vector<std::string> reader(graph.values.size());  // a live op reading each value (the last one met)
  for (int id : graph.outputs) {
    needed[static_cast<std::size_t>(id)] = true;
    reader[static_cast<std::size_t>(id)] = "the forward's output";
  }
  auto read = [&](int id, const std::string& op) {
    if (id < 0) return;
    needed[static_cast<std::size_t>(id)] = true;
    reader[static_cast<std::size_t>(id)] = op;
  };
  for (std::size_t k = graph.nodes.size(); k-- > 0;) {
    Node& node = graph.nodes[k];
    for (int id : node.outputs)
      if (id >= 0 && needed[static_cast<std::size_t>(id)]) node.live = true;
    if (!node.live) continue;
    for (int id : node.inputs) read(id, node.event.op);
    for (const auto& [name, id] : node.tensor_attributes) read(id, node.event.op);
  }
  // Note: a tensor no traced op made becomes a constant of the file. An op that never records (argmax, argmin:
  // no gradient) makes such a tensor from the input, and freezing it would give every input the example's result;
  // the forward on other input values tells the two apart (a real constant does not change). Only constants the
  // file uses are checked: the ops inside a composite op read its own intermediates, and are dropped.
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    const Value& v = graph.values[id];
    if (!needed[id] || v.kind != Value::Kind::Constant || !v.tensor_c.defined() || same_values(v.tensor, v.tensor_c))
      continue;
    fail("export_onnx: {} reads a tensor of shape {} that no exportable op made, yet its values change with the "
         "input's: it comes from an op that does not report to the exporter (argmax, argmin, sign, count_nonzero, "
         "item()...), or it was made from no input and then written in place from the input, and would be frozen "
         "into the file as the example's values",
         reader[id] == "the forward's output" ? reader[id] : fmt::format("op '{}'", reader[id]), describe(v.shape));
  }
}

::onnx::TensorProto_DataType onnx_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return ::onnx::TensorProto_DataType_FLOAT;
    case DType::Float64:
      return ::onnx::TensorProto_DataType_DOUBLE;
    case DType::Int64:
      return ::onnx::TensorProto_DataType_INT64;
    case DType::BFloat16:
      break;  // Note: export writes float32/float64/int64 data fields only; a bfloat16 model is converted first.
  }
  fail("export_onnx: dtype {} has no ONNX type", dtype_name(dtype));
}

::onnx::TensorProto tensor_proto(const Tensor& tensor, const std::string& name) {
  ::onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(onnx_type(tensor.dtype()));
  for (std::int64_t extent : tensor.shape()) proto.add_dims(extent);
  const Tensor values = tensor.contiguous();
  // Note: raw_data is little-endian, which is this machine's order (x86-64).
  const std::size_t bytes = static_cast<std::size_t>(values.numel()) * element_size(values.dtype());
  std::string raw(bytes, '\0');
  if (bytes > 0) {
    if (values.dtype() == DType::Float32) std::memcpy(raw.data(), values.data<float>(), bytes);
    if (values.dtype() == DType::Float64) std::memcpy(raw.data(), values.data<double>(), bytes);
    if (values.dtype() == DType::Int64) std::memcpy(raw.data(), values.data<std::int64_t>(), bytes);
  }
  proto.set_raw_data(std::move(raw));
  return proto;
}

std::string Builder::where(const Node& node) const {
  const nn::Module* module = node.event.module;
  // Note: an op in a module that calls its children directly (no Sequential) reports no module of its own; a
  // parameter it reads names its layer instead ("block.conv1.weight" -> "block.conv1").
  std::string path;
  bool found = false;
  if (module) {
    if (auto it = module_paths.find(module); it != module_paths.end()) {
      path = it->second;
      found = true;
    }
  }
  for (int id : node.inputs) {
    if (id < 0) continue;
    const Value& v = graph->values[static_cast<std::size_t>(id)];
    if (v.kind != Value::Kind::Parameter) continue;
    const auto dot = v.name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : v.name.substr(0, dot);
    if (!found || owner.size() > path.size()) {
      path = owner;
      found = true;
    }
  }
  if (!found) return "the model's own forward";
  for (const auto& [m, p] : module_paths)
    if (p == path)
      return path.empty() ? fmt::format("the top-level module ({})", m->type_name())
                          : fmt::format("{} ({})", path, m->type_name());
  return path;
}

std::string Builder::fresh(const std::string& hint) {
  std::string name = hint;
  while (used_names.count(name)) name = fmt::format("{}_{}", hint, ++counter);
  used_names.insert(name);
  return name;
}

std::string Builder::name_of(int id) {
  Value& v = graph->values[static_cast<std::size_t>(id)];
  const bool initializer = v.kind == Value::Kind::Parameter || v.kind == Value::Kind::Constant;
  if (v.name.empty()) {
    const Node* producer = v.producer >= 0 ? &graph->nodes[static_cast<std::size_t>(v.producer)] : nullptr;
    v.name = fresh(initializer ? "constant" : producer ? producer->event.op : "value");
  }
  if (initializer && initialized.insert(id).second) *proto->add_initializer() = tensor_proto(v.tensor, v.name);
  return v.name;
}

// ---- Context ----

const Value& Context::input_value(std::size_t i) const {
  if (!has_input(i)) unsupported(fmt::format("input {} is missing", i));
  return builder_.graph->values[static_cast<std::size_t>(node_.inputs[i])];
}
std::string Context::input(std::size_t i) {
  if (!has_input(i)) unsupported(fmt::format("input {} is missing", i));
  return builder_.name_of(node_.inputs[i]);
}
const Value& Context::output_value(std::size_t i) const {
  return builder_.graph->values[static_cast<std::size_t>(node_.outputs.at(i))];
}
std::string Context::output(std::size_t i) { return builder_.name_of(node_.outputs.at(i)); }

const trace::AttributeValue* Context::raw(const std::string& name, bool second) const {
  const trace::Attributes& list = second ? node_.attributes_b : node_.event.attributes;
  for (const trace::Attribute& a : list)
    if (a.name == name) return &a.value;
  return nullptr;
}
bool Context::has(const std::string& name) const { return raw(name) != nullptr; }

const trace::AttributeValue& Context::attribute(const std::string& name, bool second) const {
  const trace::AttributeValue* value = raw(name, second);
  if (!value) unsupported(fmt::format("the op did not report its attribute '{}'", name));
  return *value;
}

namespace {
template <class T> const T& get_as(const trace::AttributeValue& value, const std::string& name, const Context& ctx) {
  if (const T* v = std::get_if<T>(&value)) return *v;
  ctx.unsupported(fmt::format("attribute '{}' has an unexpected type", name));
}
}  // namespace

std::int64_t Context::i(const std::string& name) const {
  const auto& a = get_as<std::int64_t>(attribute(name, false), name, *this);
  if (a != get_as<std::int64_t>(attribute(name, true), name, *this))
    unsupported(fmt::format("its attribute '{}' depends on a dynamic axis", name));
  return a;
}
double Context::f(const std::string& name) const {
  const auto& a = get_as<double>(attribute(name, false), name, *this);
  const auto& b = get_as<double>(attribute(name, true), name, *this);
  if (!(a == b) && !(a != a && b != b)) unsupported(fmt::format("its attribute '{}' depends on a dynamic axis", name));
  return a;
}
std::vector<std::int64_t> Context::ints(const std::string& name) const {
  const auto& a = get_as<std::vector<std::int64_t>>(attribute(name, false), name, *this);
  if (a != get_as<std::vector<std::int64_t>>(attribute(name, true), name, *this))
    unsupported(fmt::format("its attribute '{}' depends on a dynamic axis", name));
  return a;
}
std::string Context::s(const std::string& name) const {
  return get_as<std::string>(attribute(name, false), name, *this);
}

bool Context::has_tensor(const std::string& name) const {
  auto it = node_.tensor_attributes.find(name);
  return it != node_.tensor_attributes.end() && it->second >= 0;
}
std::string Context::tensor(const std::string& name) {
  if (!has_tensor(name)) unsupported(fmt::format("the op did not report its tensor '{}'", name));
  return builder_.name_of(node_.tensor_attributes.at(name));
}
const Value& Context::tensor_value(const std::string& name) const {
  if (!has_tensor(name)) unsupported(fmt::format("the op did not report its tensor '{}'", name));
  return builder_.graph->values[static_cast<std::size_t>(node_.tensor_attributes.at(name))];
}

std::string Context::emit(const std::string& op_type, const std::vector<std::string>& inputs,
                          const std::vector<Attr>& attrs, std::vector<std::string> outputs) {
  if (outputs.empty()) outputs.push_back(fresh(op_type));
  ::onnx::NodeProto* n = builder_.proto->add_node();
  n->set_op_type(op_type);
  n->set_name(fresh(fmt::format("{}_node", op_type)));
  for (const std::string& in : inputs) n->add_input(in);
  for (const std::string& out : outputs) n->add_output(out);
  for (const Attr& a : attrs) {
    ::onnx::AttributeProto* p = n->add_attribute();
    p->set_name(a.name);
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::int64_t>) {
            p->set_type(::onnx::AttributeProto_AttributeType_INT);
            p->set_i(v);
          } else if constexpr (std::is_same_v<V, double>) {
            p->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
            p->set_f(static_cast<float>(v));
          } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
            p->set_type(::onnx::AttributeProto_AttributeType_INTS);
            for (std::int64_t x : v) p->add_ints(x);
          } else if constexpr (std::is_same_v<V, std::string>) {
            p->set_type(::onnx::AttributeProto_AttributeType_STRING);
            p->set_s(v);
          } else {
            p->set_type(::onnx::AttributeProto_AttributeType_STRINGS);
            for (const std::string& x : v) p->add_strings(x);
          }
        },
        a.value);
  }
  return outputs[0];
}

std::string Context::int64s(const std::vector<std::int64_t>& values) {
  const std::string name = fresh("const_ints");
  ::onnx::TensorProto* t = builder_.proto->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto_DataType_INT64);
  t->add_dims(static_cast<std::int64_t>(values.size()));
  for (std::int64_t v : values) t->add_int64_data(v);
  return name;
}

std::string Context::scalar(double value, DType dtype, bool as_vector) {
  const std::string name = fresh("const_scalar");
  ::onnx::TensorProto* t = builder_.proto->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx_type(dtype));
  if (as_vector) t->add_dims(1);
  if (dtype == DType::Float64)
    t->add_double_data(value);
  else if (dtype == DType::Int64)
    t->add_int64_data(static_cast<std::int64_t>(value));
  else
    t->add_float_data(static_cast<float>(value));
  return name;
}

std::string Context::reals(const std::vector<double>& values, DType dtype) {
  const std::string name = fresh("const_reals");
  ::onnx::TensorProto* t = builder_.proto->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx_type(dtype));
  t->add_dims(static_cast<std::int64_t>(values.size()));
  for (double v : values) {
    if (dtype == DType::Float64)
      t->add_double_data(v);
    else
      t->add_float_data(static_cast<float>(v));
  }
  return name;
}

std::string Context::reshape_target(std::size_t i, std::size_t from) {
  const Value& out = output_value(i);
  const Value& in = input_value(from);
  std::vector<std::int64_t> target;
  bool inferred = false;
  for (std::size_t d = 0; d < out.shape.size(); ++d) {
    if (!out.dynamic(d)) {
      if (out.shape[d] == 0) unsupported("a reshape to an empty extent");  // 0 means "copy" to ONNX
      target.push_back(out.shape[d]);
    } else if (d < in.shape.size() && in.dynamic(d) && in.shape[d] == out.shape[d] && in.shape_b[d] == out.shape_b[d]) {
      target.push_back(0);
    } else {
      if (inferred) unsupported("a reshape with two extents that depend on dynamic axes in different ways");
      inferred = true;
      target.push_back(-1);
    }
  }
  return int64s(target);
}

void Context::unsupported(const std::string& why) const {
  fail("export_onnx: op '{}' (in {}) cannot be exported to ONNX: {}", op(), builder_.where(node_), why);
}

const Converter* find_converter(const std::string& op) {
  static const std::map<std::string, Converter> table = [] {
    std::map<std::string, Converter> t;
    add_elementwise_converters(t);
    add_layer_converters(t);
    add_shape_converters(t);
    add_recurrent_converters(t);
    return t;
  }();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace tapegrad::onnx::detail
