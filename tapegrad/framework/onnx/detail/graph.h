#pragma once
// The ONNX exporter's internals: the traced graph (values and nodes, from the tracer's reports) and the context a
// converter writes ONNX nodes through. Internal to tapegrad::onnx: includes ONNX's protobuf classes.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <tapegrad/framework/autograd/trace.h>
#include <tapegrad/framework/module.h>

namespace tapegrad::onnx::detail {

/// One tensor at one point of the forward (an in-place op makes a new value of the same tensor).
struct Value {
  enum class Kind { Input, Parameter, Constant, Computed };
  Kind kind = Kind::Computed;
  Tensor tensor;  // holds it alive (and its values, for initializers)
  Shape shape;    // in the traced forward
  Shape shape_b;  // in the second forward (dynamic axes: each grown by one); == shape without dynamic axes
  DType dtype = DType::Float32;
  std::string name;   // ONNX name: fixed for inputs, parameters and graph outputs, else given on first use
  int producer = -1;  // node index for Computed
  Tensor tensor_c;    // a Constant's tensor in the forward on other input values (undefined: not known)
  /// Whether axis d's extent depends on a dynamic axis.
  bool dynamic(std::size_t d) const { return d < shape.size() && d < shape_b.size() && shape[d] != shape_b[d]; }
  bool any_dynamic() const {
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (dynamic(d)) return true;
    return shape.size() != shape_b.size();
  }
};

/// One traced op.
struct Node {
  trace::Event event;                            // as reported (attributes of the first forward)
  trace::Attributes attributes_b;                // the second forward's attributes (same as event's without)
  std::vector<int> inputs;                       // value ids, -1 for an undefined input
  std::vector<int> outputs;                      // value ids
  std::map<std::string, int> tensor_attributes;  // value ids of tensor-valued attributes (-1: undefined)
  bool live = false;                             // reached from a graph output
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;   // value ids of the graph inputs
  std::vector<int> outputs;  // value ids of the graph outputs
};

/// Builds the graph from the reports of the first forward (and of the second one, for dynamic axes). Parameters
/// and buffers are found by identity in `named_state` and keep those names. Throws when the two forwards differ
/// in their ops or in a constant's shape.
Graph build_graph(const std::vector<Tensor>& inputs, const std::vector<trace::Event>& events,
                  const std::vector<Tensor>& outputs, const std::vector<Tensor>* inputs_b,
                  const std::vector<trace::Event>* events_b, const std::vector<Tensor>* outputs_b,
                  const nn::NamedTensors& named_state, const std::vector<trace::Event>* events_c = nullptr,
                  const std::vector<Tensor>* outputs_c = nullptr);

/// Marks the nodes the graph outputs reach (the rest: ops inside ops, dead work). Throws when a constant they
/// read has other values in the forward on other input values (it was computed from the input by an op that
/// did not report to the tracer).
void mark_live(Graph& graph);

/// An ONNX node attribute.
struct Attr {
  std::string name;
  std::variant<std::int64_t, double, std::vector<std::int64_t>, std::string, std::vector<std::string>> value;
};

::onnx::TensorProto_DataType onnx_type(DType dtype);
/// A TensorProto holding `tensor`'s values (contiguous, little-endian raw data).
::onnx::TensorProto tensor_proto(const Tensor& tensor, const std::string& name);

class Context;
/// Writes the ONNX nodes of one traced op.
using Converter = std::function<void(Context&)>;
/// The converter of `op`, or null when the op has no ONNX mapping.
const Converter* find_converter(const std::string& op);

/// Converter tables, one per file (converters_*.cpp); find_converter merges them.
void add_elementwise_converters(std::map<std::string, Converter>& table);
void add_layer_converters(std::map<std::string, Converter>& table);
void add_shape_converters(std::map<std::string, Converter>& table);
void add_recurrent_converters(std::map<std::string, Converter>& table);  // converters_recurrent.cpp (onnx-runtime)

/// The state of the ONNX graph being written: names, initializers, the opset, and where each module sits.
struct Builder {
  Graph* graph = nullptr;
  ::onnx::GraphProto* proto = nullptr;
  int opset = 13;
  std::unordered_map<const nn::Module*, std::string> module_paths;  // "" for the root
  std::unordered_set<std::string> used_names;  // every name given (reserve fixed names before converting)
  std::unordered_set<int> initialized;         // values whose initializer is written
  int counter = 0;
  /// "features.3 (MaxPool2d)" for the module node `node` ran in.
  std::string where(const Node& node) const;
  /// A name not used yet, from `hint`.
  std::string fresh(const std::string& hint);
  /// The ONNX name of value `id`, adding its initializer on first use of a parameter or constant.
  std::string name_of(int id);
};

/// What a converter sees: the traced op, its values, and how to emit nodes.
class Context {
 public:
  Context(Builder& builder, const Node& node) : builder_(builder), node_(node) {}

  const std::string& op() const { return node_.event.op; }
  int opset() const { return builder_.opset; }

  // ---- inputs and outputs ----
  std::size_t input_count() const { return node_.inputs.size(); }
  bool has_input(std::size_t i) const { return i < node_.inputs.size() && node_.inputs[i] >= 0; }
  std::string input(std::size_t i);
  const Value& input_value(std::size_t i) const;
  std::size_t output_count() const { return node_.outputs.size(); }
  std::string output(std::size_t i = 0);
  const Value& output_value(std::size_t i = 0) const;
  /// The output's dtype (the op's computing dtype).
  DType dtype() const { return output_value(0).dtype; }

  // ---- the op's attributes ----
  bool has(const std::string& name) const;
  /// A number attribute; throws unless it is the same in both forwards (it must not depend on a dynamic axis).
  std::int64_t i(const std::string& name) const;
  double f(const std::string& name) const;
  std::vector<std::int64_t> ints(const std::string& name) const;
  std::string s(const std::string& name) const;
  /// Whether a tensor attribute is present and defined.
  bool has_tensor(const std::string& name) const;
  std::string tensor(const std::string& name);
  const Value& tensor_value(const std::string& name) const;
  /// An attribute as reported by the first forward, without the both-forwards check.
  const trace::AttributeValue* raw(const std::string& name, bool second = false) const;

  // ---- emitting ----
  /// Adds a node; returns its first output's name (a fresh one unless `outputs` is given).
  std::string emit(const std::string& op_type, const std::vector<std::string>& inputs,
                   const std::vector<Attr>& attrs = {}, std::vector<std::string> outputs = {});
  std::string fresh(const std::string& hint) { return builder_.fresh(hint); }
  /// A constant initializer: int64 values (a 1-d tensor), or one real of `dtype` (0-d, or 1-d when `as_vector`).
  std::string int64s(const std::vector<std::int64_t>& values);
  std::string scalar(double value, DType dtype, bool as_vector = false);
  std::string reals(const std::vector<double>& values, DType dtype);
  /// Reshape's shape input for output `i`: static extents as they are, a dynamic extent as 0 (copied from the
  /// same axis of input `from`) when it equals that axis in both forwards, else as -1 (at most one).
  std::string reshape_target(std::size_t i = 0, std::size_t from = 0);
  /// Throws the unsupported-op error: the op, the layer it ran in, and `why`.
  [[noreturn]] void unsupported(const std::string& why) const;

 private:
  const trace::AttributeValue& attribute(const std::string& name, bool second) const;
  Builder& builder_;
  const Node& node_;
};

}  // namespace tapegrad::onnx::detail
