// tapegrad-inspect's view of an ONNX model: IR version, opsets, producer, the graph's inputs and outputs (dtype,
// shape with symbolic axes by name), node counts by op and every initializer (name, dtype, shape). Read with
// ONNX's own protobuf classes (Debian's libonnx-dev); built only when the ONNX component is (tools/CMakeLists.txt).
#include <onnx/onnx_pb.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <tapegrad/framework/error.h>

namespace {

std::string element_type(std::int32_t type) {
  switch (type) {
    case ::onnx::TensorProto::FLOAT: return "float32";
    case ::onnx::TensorProto::DOUBLE: return "float64";
    case ::onnx::TensorProto::INT64: return "int64";
    case ::onnx::TensorProto::INT32: return "int32";
    case ::onnx::TensorProto::FLOAT16: return "float16";
    case ::onnx::TensorProto::BFLOAT16: return "bfloat16";
    case ::onnx::TensorProto::BOOL: return "bool";
    case ::onnx::TensorProto::UINT8: return "uint8";
    case ::onnx::TensorProto::INT8: return "int8";
    default: return fmt::format("type {}", type);
  }
}

// "[batch, 1, 28, 28]": a symbolic axis by its name, an unknown one as "?"; "-" when the type is not a tensor.
std::string shape_of(const ::onnx::ValueInfoProto& value) {
  if (!value.type().has_tensor_type()) return "-";
  const auto& tensor = value.type().tensor_type();
  if (!tensor.has_shape()) return "(unknown rank)";
  std::vector<std::string> dims;
  for (const auto& dim : tensor.shape().dim())
    dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.has_dim_param() ? dim.dim_param() : "?");
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

void print_values(const char* title, const google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>& values) {
  fmt::print("\n{} ({})\n", title, values.size());
  for (const auto& v : values)
    fmt::print("  {:<40} {:<9} {}\n", v.name(),
               v.type().has_tensor_type() ? element_type(v.type().tensor_type().elem_type()) : "-", shape_of(v));
}

}  // namespace

/// Prints the file and returns true when `path` names an ONNX model (.onnx); throws when such a file does not parse.
bool print_onnx_file(const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".onnx") != 0) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) tapegrad::fail("cannot open {}", path);
  ::onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) tapegrad::fail("{}: not an ONNX model (the protobuf does not parse)", path);
  const ::onnx::GraphProto& graph = model.graph();
  std::vector<std::string> opsets;
  for (const auto& opset : model.opset_import())
    opsets.push_back(fmt::format("{} {}", opset.domain().empty() ? "ai.onnx" : opset.domain(), opset.version()));
  fmt::print("{}\n  ONNX model, IR version {}, opset {}, producer '{}' {}, graph '{}'\n", path, model.ir_version(),
             fmt::join(opsets, ", "), model.producer_name(), model.producer_version(), graph.name());
  print_values("inputs", graph.input());
  print_values("outputs", graph.output());

  std::map<std::string, int> by_op;
  for (const auto& node : graph.node()) ++by_op[node.domain().empty() ? node.op_type() : node.domain() + "." + node.op_type()];
  fmt::print("\nnodes ({}) by op\n", graph.node_size());
  for (const auto& [op, count] : by_op) fmt::print("  {:<40} {}\n", op, count);

  std::int64_t elements = 0;
  for (const auto& init : graph.initializer()) {
    std::int64_t n = 1;
    for (const auto d : init.dims()) n *= d;
    elements += n;
  }
  fmt::print("\ninitializers ({}, {} elements)\n", graph.initializer_size(), elements);
  for (const auto& init : graph.initializer()) {
    std::vector<std::int64_t> dims(init.dims().begin(), init.dims().end());
    fmt::print("  {:<40} {:<9} [{}]\n", init.name(), element_type(init.data_type()), fmt::join(dims, ", "));
  }
  return true;
}
