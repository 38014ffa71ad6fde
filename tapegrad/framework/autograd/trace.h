#pragma once
/// Tracing: while a Tracer is active on a thread, every op run on it reports what it computed (op name, inputs,
/// outputs, attributes), whether or not grad mode records. The ONNX exporter (tapegrad::onnx) builds its graph
/// from these reports.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {
class Module;
}

namespace tapegrad::trace {

/// Note: how ops report. record_if_needed (autograd/function.h) reports every op that can record, with the
/// op name and the inputs it records, before deciding whether to record; an in-place op reports from its
/// InPlaceRecord (ops/detail/inplace.h). An op whose ONNX form needs more than its inputs (conv's stride,
/// a reshape's shape, add's scalar, embedding's indices) calls annotate(out, ...) right before it records: the
/// attributes join the report whose first output is `out` (an op whose report comes from an inner helper calls
/// annotate_reported(out, ...) right after it instead). Ops built from other ops (log_softmax from
/// logsumexp, an op's internal contiguous()) report their inner ops too: a consumer keeps only what its graph's
/// outputs reach. With no tracer active, all of this costs one thread-local load and one branch per op.
///
/// Layer-level export (ONNX's LSTM, GRU and attention are whole layers): a layer opens a LayerScope in its
/// forward; while it is open the ops inside report nothing, and the layer reports itself once, as one op
/// ("nn.LSTM") with all its inputs, outputs and attributes. A consumer maps that op name like any other:
///
///   Tensor MyLayer::forward(const Tensor& x) {
///     trace::LayerScope scope(*this);             // inner ops are silent while tracing
///     Tensor y = ...;                            // the layer's ops
///     if (scope.tracing()) scope.report("nn.MyLayer", {x, weight}, {y}, {{"hidden_size", hidden_}});
///     return y;
///   }
///
/// Sequential opens a ModuleScope around each child, so a report knows the innermost module it ran in (the
/// exporter names it in errors: "features.3 (MaxPool2d)").

/// An attribute value: integers, reals, their lists, a string, or a tensor (an extra input such as indices or a
/// running statistic, which a consumer makes a graph input or a constant).
using AttributeValue =
    std::variant<std::int64_t, double, std::vector<std::int64_t>, std::vector<double>, std::string, Tensor>;

/// One named attribute of a report.
struct Attribute {
  std::string name;
  AttributeValue value;
};
using Attributes = std::vector<Attribute>;

/// What one op computed.
struct Event {
  std::string op;                      ///< the op's name ("conv2d", "add", "relu_", "nn.LSTM")
  std::vector<Tensor> inputs;          ///< as the op recorded them; undefined where an optional input is absent
  std::vector<Tensor> outputs;         ///< the tensors it returned (for an in-place op: the target)
  Attributes attributes;               ///< what annotate() or a LayerScope added
  bool in_place = false;               ///< the op wrote outputs[0], which is also inputs[0], in place
  const nn::Module* module = nullptr;  ///< the innermost module a ModuleScope or LayerScope had open, or null
};

/// Receives the reports of one thread while a TracerGuard has it installed.
class Tracer {
 public:
  virtual ~Tracer() = default;
  /// Called once per op, in execution order.
  virtual void on_event(Event event) = 0;
  /// Called by annotate_reported(): add `attributes` to the event delivered last.
  virtual void on_late_attributes(Attributes attributes) = 0;

 private:
  friend void report(const char*, const std::vector<Tensor>&, const std::vector<Tensor>&, Attributes);
  friend void report_in_place(const char*, const Tensor&, const std::vector<Tensor>&);
  friend void annotate(const Tensor&, Attributes);
  friend void annotate_reported(const Tensor&, Attributes);
  friend class ModuleScope;
  friend class LayerScope;
  void deliver(Event event);
  std::vector<const nn::Module*> modules_;
  int silenced_ = 0;  // open LayerScopes: their inner ops do not report
  const void* pending_output_ = nullptr;
  const void* last_output_ = nullptr;  // the first output of the event delivered last
  Attributes pending_;                 // annotate()'s attributes, waiting for the report of pending_output_
};

namespace detail {
/// The calling thread's tracer; null almost always. Note: constinit, so reading it needs no TLS wrapper call.
extern constinit thread_local Tracer* current_tracer;
}  // namespace detail

/// True while a Tracer is installed on this thread.
inline bool active() { return detail::current_tracer != nullptr; }

/// Reports an op to the active tracer (does nothing without one, or inside a LayerScope).
void report(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            Attributes attributes = {});
/// Reports an in-place op: `target` (its value before the write) and the operands are the inputs, `target`
/// (its new value) the output.
void report_in_place(const char* op, const Tensor& target, const std::vector<Tensor>& operands);
/// Attaches attributes to the next report whose first output is `output`: call it right before the op reports.
void annotate(const Tensor& output, Attributes attributes);
/// Attaches attributes to the report just delivered, if its first output is `output`: for an op whose report
/// comes from a helper it calls (avg_pool2d) or from its InPlaceRecord (the in-place ops).
void annotate_reported(const Tensor& output, Attributes attributes);

/// RAII: installs `tracer` on this thread for a scope; restores the previous one on exit.
class TracerGuard {
 public:
  explicit TracerGuard(Tracer& tracer);
  ~TracerGuard();
  TracerGuard(const TracerGuard&) = delete;
  TracerGuard& operator=(const TracerGuard&) = delete;

 private:
  Tracer* previous_;
};

/// RAII: while tracing, reports made in this scope name `module` as the module they ran in.
class ModuleScope {
 public:
  explicit ModuleScope(const nn::Module& module) {
    if (active()) [[unlikely]]
      enter(module);
  }
  ~ModuleScope() {
    if (tracer_) leave();
  }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  void enter(const nn::Module& module);
  void leave();
  Tracer* tracer_ = nullptr;
};

/// RAII: a layer that exports as one op (see the note above). While tracing, the ops run in this scope report
/// nothing; report() reports the layer itself.
class LayerScope {
 public:
  explicit LayerScope(const nn::Module& module) {
    if (active()) [[unlikely]]
      enter(module);
  }
  ~LayerScope() {
    if (tracer_) leave();
  }
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

  /// True when a tracer was active when the scope opened: only then is report() worth building.
  bool tracing() const { return tracer_ != nullptr; }
  /// Reports the layer as one op, naming its module (at most once per scope).
  void report(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              Attributes attributes = {});

 private:
  void enter(const nn::Module& module);
  void leave();
  Tracer* tracer_ = nullptr;
};

}  // namespace tapegrad::trace

TAPEGRAD_API_END
