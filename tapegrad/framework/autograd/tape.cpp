// The Wengert list. One per thread; records are appended in creation order, which is already a
// topological order, so backward is one reverse loop over a flat list: no recursion, no sort.
#include <tapegrad/framework/autograd/tape.h>
#include <tapegrad/framework/autograd/tape_inspect.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <tapegrad/framework/autograd/detail/first_order_only.h>
#include <tapegrad/framework/autograd/detail/observed_pass.h>
#include <tapegrad/framework/autocast.h>
#include <tapegrad/framework/autograd/function.h>
#include <tapegrad/framework/detail/dispatch.h>
#include <tapegrad/framework/detail/memory_format.h>
#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad {

namespace {

struct Record {
  const char* op;
  std::vector<std::shared_ptr<AutogradMeta>> inputs;  // null where that input needs no gradient
  std::weak_ptr<AutogradMeta> output;
  BackwardFn backward;
  const char* create_graph_refusal = nullptr;  // set by mark_first_order_only
  bool released = false;

  void release() {
    released = true;
    inputs.clear();
    backward = nullptr;
  }
};

// Note: a deque, because records appended while a backward(create_graph) runs must not move the
// record whose closure is executing; pruning (which compacts) is suspended during backward.
std::atomic<std::uint64_t> next_tape_id{1};

struct Tape {
  std::uint64_t id = next_tape_id.fetch_add(1, std::memory_order_relaxed);  // never reused, even after a thread exits
  std::deque<Record> records;
  std::size_t prune_threshold = 4096;
  int backward_depth = 0;
};

Tape& tape() {
  thread_local Tape instance;
  return instance;
}

// A record whose output no live tensor holds can never receive a gradient. Walking back to front
// releases such records, which drops their references to inputs, so whole dead chains go in one pass.
void prune(Tape& t) {
  if (t.backward_depth > 0) return;
  for (auto it = t.records.rbegin(); it != t.records.rend(); ++it)
    if (!it->released && it->output.expired()) it->release();
  t.records.erase(std::remove_if(t.records.begin(), t.records.end(), [](const Record& r) { return r.released; }),
                  t.records.end());
  t.prune_threshold = std::max<std::size_t>(4096, 2 * t.records.size());
}

bool storage_is_unshared(const Tensor& g) {
  return g.impl().use_count() == 1 && g.impl()->storage.use_count() == 1;
}

// A copy of the dense gradient `g` in its own format. Note: clone() would give a row-major copy of a
// channels-last g, and a channels-last leaf's .grad must stay channels-last (see deposit).
Tensor copy_dense(const Tensor& g) {
  const MemoryFormat format = detail::dense_format(g);
  Tensor out = empty(g.shape(), g.dtype(), format);
  std::memcpy(out.raw_data(format), g.raw_data(format), static_cast<std::size_t>(g.numel()) * element_size(g.dtype()));
  return out;
}

// Note: the tape adds gradients itself rather than calling the add op, so autograd needs nothing from ops, the
// level above it. By BackwardFn's contract a gradient has its tensor's shape and dtype, so the sum is the add
// op's same-shape case; under create_graph it is recorded as "add" (each term receives the incoming gradient),
// so the sum stays differentiable.
Tensor add_gradients(const Tensor& existing, const Tensor& incoming) {
  if (existing.shape() != incoming.shape() || existing.dtype() != incoming.dtype())
    fail("backward: a gradient of shape {} ({}) arrived for a tensor whose gradient so far is {} ({}); a backward "
         "function must return each input's gradient in that input's shape and dtype",
         shape_string(incoming.shape()), dtype_name(incoming.dtype()), shape_string(existing.shape()),
         dtype_name(existing.dtype()));
  // Note: the sum takes the format of the gradient so far (a leaf's: its own, see deposit); an incoming one in
  // the other format (a row-major op's gradient reaching a channels-last tensor) is converted first.
  const MemoryFormat format = detail::dense_format(existing);
  const Tensor in_format = detail::values_in_format(incoming, format);
  // Outside create_graph, a sum that nothing else can see (its tensor and storage held by this gradient alone:
  // not a .grad the caller kept, not another tensor's gradient) is added to in place, as PyTorch's InputBuffer
  // and AccumulateGrad do: no fresh buffer (and its page faults) at every join of a residual network.
  if (!is_grad_enabled() && storage_is_unshared(existing) && existing.is_contiguous(format)) {
    detail::dispatch_floating(existing.dtype(), "add", [&](auto tag) {
      using T = decltype(tag);
      T* a = const_cast<Tensor&>(existing).data<T>(format);
      const T* b = in_format.data<T>(format);
      for (std::int64_t i = 0, n = existing.numel(); i < n; ++i) a[i] += b[i];
    });
    return existing;
  }
  const Tensor so_far = detail::values_in_format(existing, format);
  Tensor sum = empty(existing.shape(), existing.dtype(), format);
  detail::dispatch_floating(existing.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const T* a = so_far.data<T>(format);
    const T* b = in_format.data<T>(format);
    T* out = sum.data<T>(format);
    for (std::int64_t i = 0, n = sum.numel(); i < n; ++i) out[i] = a[i] + b[i];
  });
  return record_if_needed("add", sum, {existing, incoming}, [] {
    return [](const Tensor& g, NeedsGrad needs) {
      return std::vector<Tensor>{needs[0] ? g : Tensor(), needs[1] ? g : Tensor()};
    };
  });
}

Tensor accumulate(const Tensor& existing, const Tensor& incoming) {
  if (!existing.defined()) return incoming;
  return add_gradients(existing, incoming);
}

enum class Mode { AccumulateIntoLeaves, CaptureOnly };

// Gives `meta` one more gradient contribution. Gradients add up, so a tensor used twice gets both.
void deposit(AutogradMeta& meta, Tensor gradient, Mode mode, bool create_graph) {
  // A backward function may return a view (the gradient of permute is a permuted g); gradients are kept dense,
  // so .grad and the sums below can be read as flat arrays. Free when already dense. Note: dense means row-major
  // or channels-last: a leaf's .grad takes the leaf's format (PyTorch's layout contract: a channels-last
  // parameter gets a channels-last .grad), a non-leaf's gradient keeps the channels-last format it arrives in.
  const bool channels_last = (meta.is_leaf && mode == Mode::AccumulateIntoLeaves)
                                 ? meta.channels_last
                                 : detail::is_strictly_channels_last(gradient);
  if (channels_last && gradient.dim() == 4)
    gradient = gradient.contiguous(MemoryFormat::ChannelsLast);
  else if (!gradient.is_contiguous())
    gradient = gradient.contiguous();
  if (meta.capture) meta.captured_grad = accumulate(meta.captured_grad, gradient);
  if (meta.is_leaf) {
    if (mode == Mode::CaptureOnly) return;
    // A fresh tensor can become .grad as is; one shared with another gradient must be copied, or an
    // in-place update of one parameter's .grad (clipping) would change another's.
    if (!meta.grad.defined())
      meta.grad = (create_graph || storage_is_unshared(gradient)) ? gradient : copy_dense(gradient.detach());
    else
      meta.grad = add_gradients(meta.grad, gradient);
    return;
  }
  if (meta.producer_released)
    fail("backward: trying to backward through the graph a second time (through '{}'); its saved tensors "
         "were freed by the first backward. Pass retain_graph=true to the first backward",
         meta.grad_fn);
  meta.grad = accumulate(meta.grad, gradient);
}

// Refuses, before anything is touched, a backward this thread's tape cannot complete: an output recorded on
// another thread, or a graph that reaches into another thread's records. Walking only this tape would leave
// gradients parked in the other graph's tensors, to be added again by a later backward there.
void check_outputs(const std::vector<Tensor>& outputs, const Tape& t) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& output = outputs[i];
    output.check_defined("backward");
    if (!output.requires_grad())
      fail("backward: output {} of shape {} does not require grad (no input that requires grad reached it)", i,
           shape_string(output.shape()));
    const AutogradMeta& meta = *output.impl()->autograd;
    if (meta.is_leaf) continue;
    if (meta.tape_id != t.id)
      fail("backward: output {} of shape {} (from '{}') was recorded on another thread; tapegrad's tape is per "
           "thread, so call backward on the thread that ran the forward pass",
           i, shape_string(output.shape()), meta.grad_fn);
    if (meta.producer_released)  // checked here too, so no other output's seed is deposited first
      fail("backward: trying to backward through the graph a second time (through '{}'); its saved tensors "
           "were freed by the first backward. Pass retain_graph=true to the first backward",
           meta.grad_fn);
    if (meta.crosses_tapes)
      fail("backward: the graph of output {} of shape {} (from '{}') uses a tensor computed with autograd on "
           "another thread; tapegrad's tape is per thread, so record the whole graph on one thread (or pass "
           "detach()ed tensors between threads)",
           i, shape_string(output.shape()), meta.grad_fn);
  }
}

// Under create_graph, refuses before any gradient is deposited a graph that reaches a first-order-only record
// (autograd/detail/first_order_only.h); the same last-to-first reachability walk as scan_last_uses.
void check_create_graph(const Tape& t, const std::vector<Tensor>& outputs) {
  std::unordered_set<const AutogradMeta*> reached;
  for (const Tensor& output : outputs) reached.insert(output.impl()->autograd.get());
  for (std::size_t i = t.records.size(); i-- > 0;) {
    const Record& record = t.records[i];
    if (record.released) continue;
    const std::shared_ptr<AutogradMeta> out = record.output.lock();
    if (!out || !reached.count(out.get())) continue;
    if (record.create_graph_refusal) fail("{}", record.create_graph_refusal);
    for (const auto& input : record.inputs)
      if (input && !input->is_leaf) reached.insert(input.get());
  }
}

// For an observed pass (backward_observer.h): the records that can run are those whose output a gradient can
// reach from the outputs, found by the same last-to-first walk as backward itself; each watched leaf's last use
// is the earliest-recorded of them that takes it as an input.
void scan_last_uses(const Tape& t, const std::vector<Tensor>& outputs, std::size_t recorded,
                    autograd::detail::ObservedPass& observed) {
  std::unordered_set<const AutogradMeta*> reached;
  for (const Tensor& output : outputs) reached.insert(output.impl()->autograd.get());
  for (std::size_t i = recorded; i-- > 0;) {
    const Record& record = t.records[i];
    if (record.released) continue;
    const std::shared_ptr<AutogradMeta> out = record.output.lock();
    if (!out || (!reached.count(out.get()) && !out->grad.defined())) continue;
    for (const auto& input : record.inputs) {
      if (!input) continue;
      if (input->is_leaf)
        observed.note_use(input.get(), i);
      else
        reached.insert(input.get());
    }
  }
  observed.schedule();
}

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
                  bool create_graph, Mode mode) {
  if (outputs.empty()) fail("backward: no outputs given");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    fail("backward: {} outputs but {} grad_outputs", outputs.size(), grad_outputs.size());
  Tape& t = tape();
  check_outputs(outputs, t);
  if (create_graph) check_create_graph(t, outputs);
  GradModeGuard grad_mode(create_graph);
  // Note: backward formulas call public ops (conv_transpose2d's backward is a conv2d); a backward run inside an
  // AutocastGuard must still compute them as recorded, as PyTorch's does. The autocast records' own backward
  // decided its precision at forward time and does not look at the guard.
  AutocastGuard no_autocast(DType::BFloat16, false);
  ++t.backward_depth;
  struct DepthGuard {
    Tape& t;
    ~DepthGuard() { --t.backward_depth; }
  } depth_guard{t};

  // Note: every seed is validated before the first is deposited, so a bad one leaves no gradient behind.
  std::vector<Tensor> seeds(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& output = outputs[i];
    Tensor& seed = seeds[i];
    if (!grad_outputs.empty() && grad_outputs[i].defined()) {
      seed = grad_outputs[i];
      if (seed.shape() != output.shape())
        fail("backward: gradient of shape {} given for an output of shape {}", shape_string(seed.shape()),
             shape_string(output.shape()));
      if (seed.dtype() != output.dtype()) seed = seed.to(output.dtype());
    } else {
      if (output.numel() != 1)
        fail("backward: a gradient can be implied only for a one-element output; got shape {}",
             shape_string(output.shape()));
      seed = ones(output.shape(), TensorOptions{}.with_dtype(output.dtype()));
    }
  }
  // Note: with no observer armed (every non-distributed backward) this costs the one check below, and
  // `observed` stays empty, one predictable branch per record.
  const std::size_t recorded = t.records.size();
  std::optional<autograd::detail::ObservedPass> observed;
  if (mode == Mode::AccumulateIntoLeaves && autograd::detail::any_observer_armed()) {
    observed.emplace(autograd::BackwardPass{retain_graph, create_graph}, recorded);
    scan_last_uses(t, outputs, recorded, *observed);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) deposit(*outputs[i].impl()->autograd, seeds[i], mode, create_graph);
  if (observed) observed->ready_through(recorded);

  // Note: releasing a record drops its references to its inputs' metas, but an input produced by an
  // earlier record may still be waiting for its gradient to be consumed; keep those metas alive until
  // the pass ends.
  std::vector<std::shared_ptr<AutogradMeta>> pending;
  for (std::size_t i = recorded; i-- > 0;) {
    Record& record = t.records[i];
    if (record.released) continue;
    std::shared_ptr<AutogradMeta> out = record.output.lock();
    if (!out || !out->grad.defined()) continue;
    Tensor gradient = std::move(out->grad);
    out->grad = Tensor();

    std::uint64_t mask = 0;
    for (std::size_t j = 0; j < record.inputs.size(); ++j)
      if (record.inputs[j]) mask |= std::uint64_t{1} << j;
    std::vector<Tensor> input_grads = record.backward(gradient, NeedsGrad(mask));
    Record& same_record = t.records[i];  // a deque keeps it in place even if the closure appended records
    if (input_grads.size() != same_record.inputs.size())
      fail("backward of {}: returned {} gradients for {} inputs", same_record.op, input_grads.size(),
           same_record.inputs.size());
    for (std::size_t j = 0; j < input_grads.size(); ++j)
      if (same_record.inputs[j] && input_grads[j].defined())
        deposit(*same_record.inputs[j], std::move(input_grads[j]), mode, create_graph);
    if (!retain_graph) {
      for (auto& input : same_record.inputs)
        if (input && !input->is_leaf) pending.push_back(std::move(input));
      same_record.release();
      out->producer_released = true;
    }
    if (observed) observed->record_done(i);
  }
  if (observed) observed->finish();
}

}  // namespace

bool should_record(std::initializer_list<Tensor> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) return true;
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) return true;
  return false;
}

namespace {
// Gives `impl` a fresh non-leaf identity: the output of a new record on this thread's tape.
void append_record(const char* op, TensorImpl& impl, const std::vector<Tensor>& inputs, BackwardFn backward) {
  Tape& t = tape();
  if (t.records.size() >= t.prune_threshold) prune(t);
  auto meta = std::make_shared<AutogradMeta>();
  meta->is_leaf = false;
  meta->grad_fn = op;
  meta->tape_id = t.id;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) {
      AutogradMeta& from = *input.impl()->autograd;
      if (!from.is_leaf && (from.tape_id != t.id || from.crosses_tapes)) meta->crosses_tapes = true;
      // A leaf's layout is known here, where it is used; its .grad will take it (see deposit).
      if (from.is_leaf) from.channels_last = detail::is_strictly_channels_last(input);
    }
  impl.autograd = meta;

  Record record{op, {}, meta, std::move(backward)};
  record.inputs.reserve(inputs.size());
  for (const Tensor& input : inputs)
    record.inputs.push_back(input.defined() && input.requires_grad() ? input.impl()->autograd : nullptr);
  t.records.push_back(std::move(record));
}

void check_inputs(const char* op, const std::vector<Tensor>& inputs) {
  if (inputs.size() > 64) fail("{}: at most 64 differentiable inputs per record", op);
  for (const Tensor& input : inputs) detail::check_not_inference(input, op, "be used in an op that autograd records");
}
}  // namespace

Tensor record_op(const char* op, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  check_inputs(op, inputs);
  if (!is_floating(output.dtype())) return output;
  std::shared_ptr<TensorImpl> impl = output.impl();
  if (impl->autograd) {  // an op returned an existing tensor: give the result its own identity
    auto fresh = std::make_shared<TensorImpl>(*impl);
    impl = fresh;
  }
  append_record(op, *impl, inputs, std::move(backward));
  // A recorded view's history follows its base's (ops/inplace.cpp): it holds the base and notes its history.
  if (std::shared_ptr<TensorImpl> root = impl->base.lock()) {
    impl->untracked_view = false;
    impl->history = root->history;
    impl->tracked_base = std::move(root);
  }
  return Tensor(impl);
}

namespace autograd::detail {

void mark_first_order_only(const Tensor& output, const char* refusal) {
  if (!output.defined() || !output.impl()->autograd || output.impl()->autograd->is_leaf) return;
  Tape& t = tape();
  if (t.records.empty()) return;
  Record& last = t.records.back();
  if (last.output.lock() == output.impl()->autograd) last.create_graph_refusal = refusal;
}

}  // namespace autograd::detail

void rebase_history(const char* op, const Tensor& target, const std::vector<Tensor>& inputs, BackwardFn backward) {
  check_inputs(op, inputs);
  detail::check_not_inference(target, op, "be modified in place by an op that autograd records");
  if (!is_floating(target.dtype())) return;
  append_record(op, *target.impl(), inputs, std::move(backward));
}

SavedTensor::SavedTensor(const Tensor& tensor, const char* op)
    : tensor_(tensor), version_(tensor.defined() ? tensor.version() : 0), op_(op) {
  detail::check_not_inference(tensor, op, "be saved for backward");
}

const Tensor& SavedTensor::get() const {
  if (tensor_.defined() && tensor_.version() != version_)
    fail("backward of {}: a tensor it saved (shape {}) was modified in place after it was used (version {} -> {}); "
         "clone it before modifying, or modify it after backward",
         op_, shape_string(tensor_.shape()), version_, tensor_.version());
  return tensor_;
}

std::size_t tape_size() { return tape().records.size(); }

void prune_tape() { prune(tape()); }

std::vector<std::string> autograd::unreachable_record_ops() {
  // Note: what prune() would drop, without dropping it. prune() releases back to front, and a released record
  // lets go of its inputs, so a whole dead chain goes; here a record counts as dead when its output has
  // expired or is held only by records already found dead (plus the reference taken to look at it).
  std::unordered_map<const AutogradMeta*, long> held_by_dead;
  std::vector<std::string> names;
  const auto& records = tape().records;
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->released) continue;
    const std::shared_ptr<AutogradMeta> output = it->output.lock();
    if (output && output.use_count() - 1 > held_by_dead[output.get()]) continue;
    names.emplace_back(it->op);
    for (const auto& input : it->inputs)
      if (input) ++held_by_dead[input.get()];
  }
  std::reverse(names.begin(), names.end());
  return names;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

namespace autograd {

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, Mode::AccumulateIntoLeaves);
  if (!retain_graph && !create_graph) prune(tape());
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    inputs[j].check_defined("grad");
    if (!inputs[j].requires_grad()) fail("grad: input {} does not require grad", j);
  }
  for (const Tensor& input : inputs) {
    input.impl()->autograd->capture = true;
    input.impl()->autograd->captured_grad = Tensor();
  }
  struct CaptureReset {
    const std::vector<Tensor>& inputs;
    ~CaptureReset() {
      for (const Tensor& input : inputs) input.impl()->autograd->capture = false;
    }
  } reset{inputs};
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, Mode::CaptureOnly);
  std::vector<Tensor> result;
  result.reserve(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    Tensor g = std::move(inputs[j].impl()->autograd->captured_grad);
    inputs[j].impl()->autograd->captured_grad = Tensor();
    if (!g.defined()) {
      if (!allow_unused) fail("grad: input {} (shape {}) was not used to compute the outputs", j,
                               shape_string(inputs[j].shape()));
      g = zeros_like(inputs[j]);
    }
    result.push_back(std::move(g));
  }
  if (!retain_graph && !create_graph) prune(tape());
  return result;
}

}  // namespace autograd
}  // namespace tapegrad
