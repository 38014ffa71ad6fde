#include <tapegrad/framework/autograd/trace.h>

#include <utility>

namespace tapegrad::trace {

namespace detail {
constinit thread_local Tracer* current_tracer = nullptr;
}  // namespace detail

void Tracer::deliver(Event event) {
  if (!modules_.empty()) event.module = modules_.back();
  if (!event.outputs.empty() && event.outputs[0].defined() && event.outputs[0].impl().get() == pending_output_) {
    for (Attribute& attribute : pending_) event.attributes.push_back(std::move(attribute));
    pending_.clear();
    pending_output_ = nullptr;
  }
  last_output_ = !event.outputs.empty() && event.outputs[0].defined() ? event.outputs[0].impl().get() : nullptr;
  on_event(std::move(event));
}

void report(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            Attributes attributes) {
  Tracer* tracer = detail::current_tracer;
  if (!tracer || tracer->silenced_ > 0) return;
  tracer->deliver(Event{op, inputs, outputs, std::move(attributes), false, nullptr});
}

void report_in_place(const char* op, const Tensor& target, const std::vector<Tensor>& operands) {
  Tracer* tracer = detail::current_tracer;
  if (!tracer || tracer->silenced_ > 0) return;
  std::vector<Tensor> inputs{target};
  inputs.insert(inputs.end(), operands.begin(), operands.end());
  tracer->deliver(Event{op, std::move(inputs), {target}, {}, true, nullptr});
}

void annotate(const Tensor& output, Attributes attributes) {
  Tracer* tracer = detail::current_tracer;
  if (!tracer || tracer->silenced_ > 0) return;
  // Note: one annotation waits at a time; an op annotates right before the report it belongs to.
  tracer->pending_output_ = output.impl().get();
  tracer->pending_ = std::move(attributes);
}

void annotate_reported(const Tensor& output, Attributes attributes) {
  Tracer* tracer = detail::current_tracer;
  if (!tracer || tracer->silenced_ > 0 || output.impl().get() != tracer->last_output_) return;
  tracer->on_late_attributes(std::move(attributes));
}

TracerGuard::TracerGuard(Tracer& tracer) : previous_(detail::current_tracer) { detail::current_tracer = &tracer; }
TracerGuard::~TracerGuard() { detail::current_tracer = previous_; }

void ModuleScope::enter(const nn::Module& module) {
  tracer_ = detail::current_tracer;
  tracer_->modules_.push_back(&module);
}
void ModuleScope::leave() { tracer_->modules_.pop_back(); }

void LayerScope::enter(const nn::Module& module) {
  tracer_ = detail::current_tracer;
  tracer_->modules_.push_back(&module);
  ++tracer_->silenced_;
}
void LayerScope::leave() {
  --tracer_->silenced_;
  tracer_->modules_.pop_back();
}

void LayerScope::report(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                        Attributes attributes) {
  if (!tracer_) return;
  // Note: only the outermost open LayerScope reports: a layer-level op inside another one is part of it.
  if (tracer_->silenced_ > 1) return;
  tracer_->deliver(Event{op, inputs, outputs, std::move(attributes), false, nullptr});
}

}  // namespace tapegrad::trace
