#pragma once
// Reading an exported .onnx file back with ONNX's own library: the checker, strict shape inference, and a summary
// (op counts, initializer names, inputs and outputs with their inferred dims) for tests to assert on. Only tests
// that link tapegrad::onnx (built when ONNX is found) include it.
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <tapegrad/framework/error.h>

namespace tapegrad::testing {

/// What an ONNX file holds, after ONNX's checker and strict shape inference accepted it.
struct OnnxSummary {
  ::onnx::ModelProto model;                           // with the inferred shapes
  std::map<std::string, int> op_counts;               // node op_type -> count
  std::vector<std::string> initializers;              // in file order
  std::vector<std::string> inputs, outputs;           // graph input and output names
  std::vector<std::vector<std::string>> output_dims;  // inferred, per output: "7", a dim_param, or "?"
  std::int64_t opset = 0;
  int count(const std::string& op) const {
    auto it = op_counts.find(op);
    return it == op_counts.end() ? 0 : it->second;
  }
  bool has_initializer(const std::string& name) const {
    for (const auto& n : initializers)
      if (n == name) return true;
    return false;
  }
};

/// Loads `path`, runs onnx::checker::check_model and ONNX's shape inference (strict: an inconsistency throws),
/// and summarises the result. Throws (std::exception) when ONNX refuses the file.
inline OnnxSummary check_onnx_file(const std::string& path) {
  OnnxSummary s;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("check_onnx_file: cannot open {}", path);
  if (!s.model.ParseFromIstream(&in)) fail("check_onnx_file: {} is not an ONNX model", path);
  ::onnx::checker::check_model(s.model);
  // Note: the declared output shapes are dropped first, so the dims reported are what inference derives from
  // the inputs through every node (the exporter's own check compares them with the declared ones).
  for (auto& output : *s.model.mutable_graph()->mutable_output())
    output.mutable_type()->mutable_tensor_type()->clear_shape();
  ::onnx::ShapeInferenceOptions strict{true, 1, false};
  ::onnx::shape_inference::InferShapes(s.model, ::onnx::OpSchemaRegistry::Instance(), strict);
  const ::onnx::GraphProto& g = s.model.graph();
  for (const auto& node : g.node()) ++s.op_counts[node.op_type()];
  for (const auto& init : g.initializer()) s.initializers.push_back(init.name());
  for (const auto& input : g.input()) s.inputs.push_back(input.name());
  for (const auto& output : g.output()) {
    s.outputs.push_back(output.name());
    std::vector<std::string> dims;
    for (const auto& dim : output.type().tensor_type().shape().dim())
      dims.push_back(dim.has_dim_value()   ? std::to_string(dim.dim_value())
                     : dim.has_dim_param() ? dim.dim_param()
                                           : "?");
    s.output_dims.push_back(dims);
  }
  for (const auto& opset : s.model.opset_import())
    if (opset.domain().empty()) s.opset = opset.version();
  return s;
}

/// {"2", "10"} for a shape [2, 10]: what output_dims holds for fixed extents.
inline std::vector<std::string> dims_of(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
  for (std::int64_t e : shape) dims.push_back(std::to_string(e));
  return dims;
}

}  // namespace tapegrad::testing
