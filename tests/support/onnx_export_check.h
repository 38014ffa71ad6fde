#pragma once
// One exported model, checked three ways: ONNX's checker and strict shape inference (output shape as expected),
// and ONNX Runtime's outputs against tapegrad's own (float32: 1e-5 relative), for the test_onnx_export* tests.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <tapegrad/framework/onnx/export.h>
#include <tapegrad/tapegrad.h>
#include "support/onnx_model_check.h"
#include "support/onnx_runtime.h"

namespace tapegrad::testing {

/// A module whose forward is a function: the ops a user's own forward would call (its name in messages: "Lambda").
class Lambda : public nn::Module {
 public:
  explicit Lambda(std::function<Tensor(const Tensor&)> f) : Module("Lambda"), f_(std::move(f)) {}
  Tensor forward(const Tensor& input) override { return f_(input); }

 private:
  std::function<Tensor(const Tensor&)> f_;
};

/// A fresh path under the temporary directory for one model of this process.
inline std::string onnx_temp_path(const std::string& stem) {
  static int counter = 0;
  return (std::filesystem::temp_directory_path() / fmt::format("tapegrad_{}_{}_{}.onnx", stem, ::getpid(), ++counter))
      .string();
}

/// tapegrad's eval output for `inputs` (one input: Module::forward), with the module's flags kept.
inline Tensor eval_output(nn::Module& module, const Tensor& input) {
  NoGradGuard no_grad;
  const bool training = module.is_training();
  module.eval();
  Tensor y = module.forward(input);
  module.train(training);
  return y;
}

/// Another tensor of `x`'s shape and dtype with other values: normal for floats, int64 indices rotated by one.
inline Tensor other_values(const Tensor& x) {
  if (is_floating(x.dtype())) {
    Generator generator(12345);
    return randn(x.shape(), generator, TensorOptions{}.with_dtype(x.dtype()));
  }
  std::vector<std::int64_t> values;
  for (double v : x.to_vector()) values.push_back(static_cast<std::int64_t>(v));
  if (!values.empty()) std::rotate(values.begin(), values.begin() + 1, values.end());
  return from_vector(values, x.shape());
}

/// Models waiting for ONNX Runtime, run together: the models of one opset are merged into one graph (each
/// one's names prefixed, so they stay independent) and run in one process, which costs one Node start instead
/// of one per model. A batch declared in a test case collects what check_export adds while it lives and runs
/// when it goes out of scope; without one, check_export runs its model at once.
class OnnxRuntimeBatch {
 public:
  OnnxRuntimeBatch() : previous_(current()) { current() = this; }
  ~OnnxRuntimeBatch() {
    current() = previous_;
    if (std::uncaught_exceptions() == 0) run();
  }
  OnnxRuntimeBatch(const OnnxRuntimeBatch&) = delete;
  OnnxRuntimeBatch& operator=(const OnnxRuntimeBatch&) = delete;

  static OnnxRuntimeBatch*& current() {
    static OnnxRuntimeBatch* batch = nullptr;
    return batch;
  }

  /// `inputs` by the model's input names; `expected` in the model's output order.
  void add(const ::onnx::ModelProto& model, std::vector<NamedTensor> inputs, std::vector<Tensor> expected,
           std::string label, double rtol, double atol) {
    entries_.push_back({model, std::move(inputs), std::move(expected), std::move(label), rtol, atol});
  }

  void run() {
    std::map<std::int64_t, std::vector<std::size_t>> by_opset;
    for (std::size_t i = 0; i < entries_.size(); ++i) by_opset[opset_of(entries_[i].model)].push_back(i);
    for (const auto& [opset, members] : by_opset) run_group(opset, members);
    entries_.clear();
  }

 private:
  struct Entry {
    ::onnx::ModelProto model;
    std::vector<NamedTensor> inputs;
    std::vector<Tensor> expected;
    std::string label;
    double rtol, atol;
  };

  static std::int64_t opset_of(const ::onnx::ModelProto& model) {
    for (const auto& o : model.opset_import())
      if (o.domain().empty()) return o.version();
    return 0;
  }

  static void prefix_value_info(::onnx::ValueInfoProto& info, const std::string& prefix) {
    info.set_name(prefix + info.name());
    auto* shape = info.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto& dim : *shape->mutable_dim())
      if (dim.has_dim_param()) dim.set_dim_param(prefix + dim.dim_param());
  }

  void run_group(std::int64_t opset, const std::vector<std::size_t>& members) {
    ::onnx::ModelProto merged;
    merged.set_ir_version(entries_[members[0]].model.ir_version());
    merged.set_producer_name("tapegrad tests");
    auto* o = merged.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    ::onnx::GraphProto* g = merged.mutable_graph();
    g->set_name("batch");
    std::vector<NamedTensor> inputs;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const Entry& e = entries_[members[k]];
      const std::string prefix = fmt::format("m{}_", k);
      const ::onnx::GraphProto& source = e.model.graph();
      for (auto init : source.initializer()) {
        init.set_name(prefix + init.name());
        *g->add_initializer() = std::move(init);
      }
      for (auto node : source.node()) {
        node.set_name(prefix + node.name());
        for (auto& name : *node.mutable_input())
          if (!name.empty()) name = prefix + name;
        for (auto& name : *node.mutable_output())
          if (!name.empty()) name = prefix + name;
        *g->add_node() = std::move(node);
      }
      for (auto input : source.input()) {
        prefix_value_info(input, prefix);
        *g->add_input() = std::move(input);
      }
      for (auto output : source.output()) {
        prefix_value_info(output, prefix);
        *g->add_output() = std::move(output);
      }
      for (const NamedTensor& t : e.inputs) inputs.push_back({prefix + t.name, t.value});
    }
    const std::string path = onnx_temp_path("batch");
    {
      std::ofstream out(path, std::ios::binary);
      REQUIRE(merged.SerializeToOstream(&out));
    }
    std::vector<Tensor> got;
    try {
      got = run_in_onnx_runtime(path, inputs);
    } catch (...) {
      std::filesystem::remove(path);
      throw;
    }
    std::filesystem::remove(path);
    std::size_t at = 0;
    for (std::size_t k : members) {
      const Entry& e = entries_[k];
      for (const Tensor& expected : e.expected) {
        REQUIRE(at < got.size());
        INFO(e.label);
        CHECK(compare_outputs(expected, got[at++], e.rtol, e.atol) == "");
      }
    }
    CHECK(at == got.size());
  }

  std::vector<Entry> entries_;
  OnnxRuntimeBatch* previous_;
};

/// Exports `module` on `input`, checks the file (the output shape ONNX infers == `expected_dims`; "*" stands for
/// any symbolic extent), then queues
/// it for ONNX Runtime (see OnnxRuntimeBatch) on `input`, on another input of the same shape with other values
/// (so that a value baked in as a constant would show), and on each of `more_inputs` (other batch sizes, for a
/// dynamic axis), each compared with tapegrad's eval output. Removes the file.
inline OnnxSummary check_export(nn::Module& module, const Tensor& input, const std::vector<std::string>& expected_dims,
                                const tapegrad::onnx::ExportOptions& options = {},
                                const std::vector<Tensor>& more_inputs = {}, double rtol = 1e-5, double atol = 1e-6) {
  const std::string path = onnx_temp_path("layer");
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{path};
  tapegrad::onnx::export_onnx(module, {input.clone()}, path, options);  // a clone: an in-place layer writes into it
  OnnxSummary s = check_onnx_file(path);
  REQUIRE(s.output_dims.size() == 1);
  std::vector<std::string> dims = s.output_dims[0];
  for (std::size_t d = 0; d < dims.size() && d < expected_dims.size(); ++d)
    if (expected_dims[d] == "*" && !dims[d].empty() && !std::isdigit(static_cast<unsigned char>(dims[d][0])))
      dims[d] = "*";
  CHECK(dims == expected_dims);
  ::onnx::ModelProto model;
  {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(model.ParseFromIstream(&in));
  }
  // tapegrad's reference runs in the exported dtype: a converted copy for options.dtype.
  std::shared_ptr<nn::Module> converted;
  if (options.dtype) {
    converted = module.clone();
    converted->to(*options.dtype);
  }
  nn::Module& reference = converted ? *converted : module;
  auto as_exported = [&](const Tensor& x) {
    return options.dtype && is_floating(x.dtype()) ? x.to(*options.dtype) : x;
  };
  const std::string input_name = options.input_names.empty() ? "input" : options.input_names[0];
  std::vector<Tensor> cases{input, other_values(input)};
  cases.insert(cases.end(), more_inputs.begin(), more_inputs.end());
  std::optional<OnnxRuntimeBatch> own;
  if (!OnnxRuntimeBatch::current()) own.emplace();
  for (const Tensor& given : cases) {
    const Tensor x = as_exported(given);
    OnnxRuntimeBatch::current()->add(model, {{input_name, x}}, {eval_output(reference, x.clone())},
                                     fmt::format("{} on input {}", module.type_name(), shape_string(x.shape())), rtol,
                                     atol);
  }
  return s;
}

/// Random running statistics and affine parameters for every BatchNorm-like buffer and parameter, so that an
/// export that ignored them would not match.
inline void randomize_statistics(nn::Module& module, std::uint64_t seed = 7) {
  NoGradGuard no_grad;
  Generator generator(seed);
  for (auto& [name, buffer] : module.named_buffers()) {
    if (name.ends_with("running_mean")) buffer.copy_(randn(buffer.shape(), generator).to(buffer.dtype()));
    if (name.ends_with("running_var")) buffer.copy_(add(rand(buffer.shape(), generator), 0.5).to(buffer.dtype()));
  }
  for (auto& [name, parameter] : module.named_parameters())
    parameter.copy_(
        add(mul(randn(parameter.shape(), generator), 0.5), name.ends_with("weight") ? 1.0 : 0.0).to(parameter.dtype()));
}

}  // namespace tapegrad::testing
