#pragma once
/// ONNX export (tapegrad::onnx, the optional component built when ONNX's libraries are found): a model's eval
/// forward, traced once, written as an ONNX model that ONNX Runtime, TensorRT or OpenVINO can run.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/framework/dtype.h>
#include <tapegrad/framework/module.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::onnx {

/// How export_onnx writes the model.
struct ExportOptions {
  /// The ONNX opset (default domain): 13 to 17 (what the ONNX 1.12 checker knows).
  int opset = 13;
  /// Names of the graph's inputs, one per example input; empty: "input" (or "input_0", "input_1", ...).
  std::vector<std::string> input_names;
  /// Names of the graph's outputs, one per output of the forward; empty: "output" (or "output_0", ...).
  std::vector<std::string> output_names;
  /// Axes whose extent is left symbolic, by input or output name: {{"input", {0}}, {"output", {0}}} for a
  /// dynamic batch. An input's axis is named "<name>_dim<axis>" in the file; an output's axes follow from the graph.
  std::map<std::string, std::vector<std::int64_t>> dynamic_axes;
  /// true: each BatchNorm right after a Conv2d or Linear in a Sequential is folded into that layer's weight and
  /// bias (nn::fuse_batchnorm's rules and errors); false: every BatchNorm is a BatchNormalization node with its
  /// running statistics.
  bool fold_batchnorm = false;
  /// The floating dtype of the exported model (Float32 or Float64); unset: the model's own. A model of another
  /// dtype is converted on a copy, with the example inputs.
  std::optional<DType> dtype;
  /// The graph's name in the file.
  std::string graph_name = "tapegrad";
};

/// A forward with any number of tensor inputs and outputs (a model whose forward takes two inputs, or returns
/// a tuple), run on the module it is given (a converted copy when folding BatchNorm or converting the dtype).
using ModuleForward = std::function<std::vector<Tensor>(nn::Module& module, const std::vector<Tensor>& inputs)>;

/// Runs `module`'s forward once on `example_inputs` (one tensor: Module::forward takes one) in eval mode under
/// NoGradGuard, builds the ONNX graph of the ops it ran, checks it (onnx::checker::check_model and ONNX's
/// strict shape inference, whose output shapes must be the traced ones) and writes it to `path`. Parameters
/// and buffers become initializers named by their state() names; tensors made during the forward that come
/// from no input become initializers too. The module's training flags are restored afterwards.
/// Throws tapegrad::Error, leaving no file at `path` (an existing file is kept), when an op has no ONNX mapping
/// (naming the op and the layer it ran in: "features.3 (MaxPool2d)"), when an option is invalid, or when the
/// graph depends on a dynamic axis in a way the file cannot express.
void export_onnx(nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                 const ExportOptions& options = {});

/// The same for a forward given as a function of several inputs and outputs; `module` is the model whose
/// parameters and buffers `forward` uses (their names, the eval mode, folding and dtype conversion apply to it).
void export_onnx(nn::Module& module, const ModuleForward& forward, const std::vector<Tensor>& example_inputs,
                 const std::string& path, const ExportOptions& options = {});

/// The serialized ONNX model (the bytes export_onnx writes), for callers that keep it in memory.
std::string export_onnx_to_string(nn::Module& module, const ModuleForward& forward,
                                  const std::vector<Tensor>& example_inputs, const ExportOptions& options = {});

}  // namespace tapegrad::onnx

TAPEGRAD_API_END
