// export_onnx: trace the eval forward (twice with dynamic axes), build the graph from the reports, convert each
// live op, check with ONNX's checker and strict shape inference, and write the file atomically.
#include <tapegrad/framework/onnx/export.h>

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/framework/error.h>
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/onnx/detail/graph.h>
#include <tapegrad/framework/ops/shape_ops.h>
#include <tapegrad/layers/batch_norm_fusion.h>
#include <tapegrad/version.h>

namespace tapegrad::onnx {

namespace {

using detail::Graph;
using detail::Value;

// Keeps every report of one forward.
class Recorder : public trace::Tracer {
 public:
  void on_event(trace::Event event) override { events.push_back(std::move(event)); }
  void on_late_attributes(trace::Attributes attributes) override {
    if (events.empty()) return;
    for (trace::Attribute& a : attributes) events.back().attributes.push_back(std::move(a));
  }
  std::vector<trace::Event> events;
};

struct Trace {
  std::vector<Tensor> inputs, outputs;
  std::vector<trace::Event> events;
};

Trace run_traced(nn::Module& module, const ModuleForward& forward, const std::vector<Tensor>& inputs) {
  Trace t;
  t.inputs = inputs;
  Recorder recorder;
  {
    NoGradGuard no_grad;
    trace::TracerGuard guard(recorder);
    t.outputs = forward(module, inputs);
  }
  t.events = std::move(recorder.events);
  return t;
}

// The same tensor with each dynamic axis one longer (its first slice repeated), so that the second forward
// shows which extents follow the axis. Note: repeating existing entries keeps integer inputs (embedding
// indices) valid.
Tensor grown(const Tensor& x, const std::vector<std::int64_t>& axes) {
  Tensor y = x;
  for (std::int64_t axis : axes) y = cat({y, narrow(y, axis, 0, 1)}, axis);
  return y;
}

std::vector<std::string> default_names(std::size_t count, const char* stem) {
  if (count == 1) return {stem};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < count; ++i) names.push_back(fmt::format("{}_{}", stem, i));
  return names;
}

void set_type(::onnx::ValueInfoProto& info, const std::string& name, const Value& v,
              const std::vector<std::string>& dim_names) {
  info.set_name(name);
  ::onnx::TypeProto_Tensor* t = info.mutable_type()->mutable_tensor_type();
  t->set_elem_type(detail::onnx_type(v.dtype));
  ::onnx::TensorShapeProto* shape = t->mutable_shape();
  for (std::size_t d = 0; d < v.shape.size(); ++d) {
    if (!dim_names[d].empty())
      shape->add_dim()->set_dim_param(dim_names[d]);
    else
      shape->add_dim()->set_dim_value(v.shape[d]);
  }
}

// Replaces `path` with `bytes`: a temporary beside it, then rename, so a reader never sees a partial file.
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) fail("export_onnx: cannot create {}: {}", temporary, std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const bool flushed = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const bool closed = std::fclose(file) == 0;
  if (!written || !flushed || !closed) {
    const int error = errno;
    std::remove(temporary.c_str());
    fail("export_onnx: cannot write {}: {}", temporary, std::strerror(error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    fail("export_onnx: cannot rename {} to {}: {}", temporary, path, std::strerror(error));
  }
}

// Restores every module's training flag (parents first, so a child's own flag wins).
class TrainingFlags {
 public:
  explicit TrainingFlags(nn::Module& module) {
    for (const auto& [name, m] : module.named_modules()) flags_.emplace_back(m, m->is_training());
  }
  ~TrainingFlags() {
    for (const auto& [m, flag] : flags_) m->train(flag);
  }
  TrainingFlags(const TrainingFlags&) = delete;
  TrainingFlags& operator=(const TrainingFlags&) = delete;

 private:
  std::vector<std::pair<nn::Module*, bool>> flags_;
};

std::string build_model(nn::Module& module, const ModuleForward& forward, const std::vector<Tensor>& example_inputs,
                        const ExportOptions& options) {
  if (options.opset < 13 || options.opset > 17)
    fail(
        "export_onnx: opset {} is not supported (13 to 17: what ONNX 1.12 knows, and from 13 on the ops' forms "
        "used here)",
        options.opset);
  if (example_inputs.empty()) fail("export_onnx: no example inputs");
  for (std::size_t i = 0; i < example_inputs.size(); ++i)
    if (!example_inputs[i].defined()) fail("export_onnx: example input {} is undefined", i);
  if (!options.input_names.empty() && options.input_names.size() != example_inputs.size())
    fail("export_onnx: {} input names for {} example inputs", options.input_names.size(), example_inputs.size());
  if (options.dtype && !is_floating(*options.dtype))
    fail("export_onnx: dtype must be Float32 or Float64, got {}", dtype_name(*options.dtype));
  const std::vector<std::string> input_names =
      options.input_names.empty() ? default_names(example_inputs.size(), "input") : options.input_names;

  // The model that is traced: the module itself in eval mode, or an eval-mode copy (folded, converted).
  TrainingFlags restore(module);
  module.eval();
  std::shared_ptr<nn::Module> copy;
  if (options.fold_batchnorm) copy = nn::fuse_batchnorm(module);
  if (options.dtype) {
    if (!copy) copy = module.clone();
    copy->to(*options.dtype);
    copy->eval();
  }
  nn::Module& model = copy ? *copy : module;
  std::vector<Tensor> inputs;
  for (const Tensor& x : example_inputs)
    inputs.push_back(options.dtype && is_floating(x.dtype()) ? x.to(*options.dtype) : x);

  // Which axes of which inputs are dynamic; names for them in the file.
  std::vector<std::vector<std::string>> input_dims(inputs.size());
  std::vector<std::vector<std::int64_t>> input_axes(inputs.size());
  bool any_dynamic = false;
  std::set<std::string> known(input_names.begin(), input_names.end());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    input_dims[i].assign(inputs[i].shape().size(), "");
    auto it = options.dynamic_axes.find(input_names[i]);
    if (it == options.dynamic_axes.end()) continue;
    for (std::int64_t axis : it->second) {
      if (axis < 0 || axis >= inputs[i].dim())
        fail("export_onnx: dynamic axis {} of input '{}' is out of range for its shape {}", axis, input_names[i],
             shape_string(inputs[i].shape()));
      if (inputs[i].size(axis) < 1)
        fail("export_onnx: dynamic axis {} of input '{}' is empty in the example", axis, input_names[i]);
      input_dims[i][static_cast<std::size_t>(axis)] = fmt::format("{}_dim{}", input_names[i], axis);
      input_axes[i].push_back(axis);
      any_dynamic = true;
    }
  }

  const Trace a = run_traced(model, forward, inputs);
  const std::vector<std::string> output_names =
      options.output_names.empty() ? default_names(a.outputs.size(), "output") : options.output_names;
  if (output_names.size() != a.outputs.size())
    fail("export_onnx: {} output names for {} outputs of the forward", output_names.size(), a.outputs.size());
  known.insert(output_names.begin(), output_names.end());
  for (const auto& [name, axes] : options.dynamic_axes)
    if (!known.count(name)) fail("export_onnx: dynamic_axes names '{}', which is no input or output", name);
  Trace b;
  if (any_dynamic) {
    std::vector<Tensor> inputs_b;
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs_b.push_back(grown(inputs[i], input_axes[i]));
    b = run_traced(model, forward, inputs_b);
    if (b.outputs.size() != a.outputs.size()) fail("export_onnx: the forward's output count depends on a dynamic axis");
  }

  // The forward once more on other values of the floating inputs (integer ones, often indices, kept), so that
  // build_graph can refuse a tensor it would freeze as a constant although it follows the input. A forward that
  // refuses those values, or runs other ops on them, is not checked this way.
  Trace c;
  bool rerun = false;
  {
    std::vector<Tensor> inputs_c;
    Generator generator(0x5eed);
    for (const Tensor& x : inputs)
      inputs_c.push_back(is_floating(x.dtype()) ? randn(x.shape(), generator).to(x.dtype()) : x);
    try {
      c = run_traced(model, forward, inputs_c);
      rerun = c.outputs.size() == a.outputs.size();
    } catch (const Error&) {
      rerun = false;
    }
  }

  nn::NamedTensors state = model.named_parameters();
  for (auto& entry : model.named_buffers()) state.push_back(entry);
  Graph graph = detail::build_graph(a.inputs, a.events, a.outputs, any_dynamic ? &b.inputs : nullptr,
                                    any_dynamic ? &b.events : nullptr, any_dynamic ? &b.outputs : nullptr, state,
                                    rerun ? &c.events : nullptr, rerun ? &c.outputs : nullptr);
  detail::mark_live(graph);

  ::onnx::ModelProto proto;
  proto.set_ir_version(::onnx::IR_VERSION);
  proto.set_producer_name("tapegrad");
  proto.set_producer_version(TAPEGRAD_VERSION_STRING);
  ::onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  ::onnx::GraphProto* g = proto.mutable_graph();
  g->set_name(options.graph_name);

  detail::Builder builder;
  builder.graph = &graph;
  builder.proto = g;
  builder.opset = options.opset;
  for (const auto& [path, m] : model.named_modules()) builder.module_paths[m] = path;
  for (const auto& [name, tensor] : state) builder.used_names.insert(name);
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    if (builder.used_names.count(input_names[i]))
      fail("export_onnx: input name '{}' is taken (a parameter, buffer or another input)", input_names[i]);
    builder.used_names.insert(input_names[i]);
    graph.values[static_cast<std::size_t>(graph.inputs[i])].name = input_names[i];
  }
  std::vector<bool> bound(graph.outputs.size(), false);  // output value named after the output itself
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    if (builder.used_names.count(output_names[i])) fail("export_onnx: output name '{}' is taken", output_names[i]);
    builder.used_names.insert(output_names[i]);
    Value& v = graph.values[static_cast<std::size_t>(graph.outputs[i])];
    if (v.kind == Value::Kind::Computed && v.name.empty()) {
      v.name = output_names[i];
      bound[i] = true;
    }
  }

  for (detail::Node& node : graph.nodes) {
    if (!node.live) continue;
    const detail::Converter* convert = detail::find_converter(node.event.op);
    detail::Context context(builder, node);
    if (!convert) context.unsupported("the op has no ONNX mapping");
    (*convert)(context);
  }
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    if (bound[i]) continue;
    ::onnx::NodeProto* n = g->add_node();
    n->set_op_type("Identity");
    n->set_name(builder.fresh("Identity_output"));
    n->add_input(builder.name_of(graph.outputs[i]));
    n->add_output(output_names[i]);
  }

  for (std::size_t i = 0; i < graph.inputs.size(); ++i)
    set_type(*g->add_input(), input_names[i], graph.values[static_cast<std::size_t>(graph.inputs[i])], input_dims[i]);
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    const Value& v = graph.values[static_cast<std::size_t>(graph.outputs[i])];
    std::vector<std::string> dims(v.shape.size(), "");
    for (std::size_t d = 0; d < v.shape.size(); ++d) {
      if (!v.dynamic(d)) continue;
      // A dynamic extent that equals an input's dynamic axis in both forwards takes that axis' name.
      dims[d] = fmt::format("{}_dim{}", output_names[i], d);
      for (std::size_t j = 0; j < graph.inputs.size() && dims[d].rfind(output_names[i], 0) == 0; ++j) {
        const Value& in = graph.values[static_cast<std::size_t>(graph.inputs[j])];
        for (std::size_t e = 0; e < in.shape.size(); ++e)
          if (!input_dims[j][e].empty() && in.shape[e] == v.shape[d] && in.shape_b[e] == v.shape_b[d]) {
            dims[d] = input_dims[j][e];
            break;
          }
      }
    }
    if (auto it = options.dynamic_axes.find(output_names[i]); it != options.dynamic_axes.end())
      for (std::int64_t axis : it->second)
        if (axis < 0 || axis >= static_cast<std::int64_t>(dims.size()) || dims[static_cast<std::size_t>(axis)].empty())
          fail("export_onnx: dynamic axis {} of output '{}' (shape {}) does not follow any dynamic input axis", axis,
               output_names[i], shape_string(v.shape));
    set_type(*g->add_output(), output_names[i], v, dims);
  }

  try {
    ::onnx::checker::check_model(proto);
    ::onnx::ModelProto inferred = proto;
    ::onnx::ShapeInferenceOptions strict{true, 1, false};
    ::onnx::shape_inference::InferShapes(inferred, ::onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception& e) {
    fail("export_onnx: ONNX refused the exported graph (a tapegrad bug, please report it): {}", e.what());
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) fail("export_onnx: the model could not be serialized (over 2 GB?)");
  return bytes;
}

std::vector<Tensor> module_forward(nn::Module& module, const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1)
    fail("export_onnx: Module::forward takes one input, got {} example inputs (pass a forward function)",
         inputs.size());
  return {module.forward(inputs[0])};
}

}  // namespace

std::string export_onnx_to_string(nn::Module& module, const ModuleForward& forward,
                                  const std::vector<Tensor>& example_inputs, const ExportOptions& options) {
  return build_model(module, forward, example_inputs, options);
}

void export_onnx(nn::Module& module, const ModuleForward& forward, const std::vector<Tensor>& example_inputs,
                 const std::string& path, const ExportOptions& options) {
  // Note: everything that can fail happens before the file is touched.
  const std::string bytes = build_model(module, forward, example_inputs, options);
  write_atomically(path, bytes);
}

void export_onnx(nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                 const ExportOptions& options) {
  export_onnx(module, module_forward, example_inputs, path, options);
}

}  // namespace tapegrad::onnx
