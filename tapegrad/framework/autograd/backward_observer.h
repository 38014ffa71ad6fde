#pragma once
/// Watching a backward pass: told the moment each watched leaf's gradient is final (to overlap work with it).
#include <tapegrad/export.h>
#include <cstddef>
#include <memory>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::autograd {

/// What the observed backward pass was asked to do.
struct BackwardPass {
  bool retain_graph = false;
  bool create_graph = false;
};

/// Note: an observer is armed for one backward pass at a time (observe_next_backward). The tape walks its
/// records from last to first; a leaf's gradient is final once every record that will still run and takes the
/// leaf as an input has run. Before the loop the tape finds, from the outputs, the records that can run (those
/// whose output a gradient can reach) and each watched leaf's last one among them; right after that record's
/// gradients are deposited it calls on_gradient_ready. This is what PyTorch's DDP reducer learns from its
/// gradient-accumulator hooks, and it covers a leaf used by several records (ready after the earliest-recorded
/// one), one used under retain_graph or create_graph (the same rule; the pass tells the observer which), and
/// one no gradient reaches in this pass (ready before the first record runs, its .grad untouched: PyTorch's
/// find_unused_parameters, for free here because the tape is a flat list). A record that can run but returns
/// no gradient for the leaf only makes the notice come later than it could, never too early.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  /// The pass starts (outputs checked, no gradient deposited yet). Returns the leaves to watch, by position;
  /// the vector must stay alive and unchanged until on_backward_end. An empty vector: only begin and end.
  virtual const std::vector<Tensor>& on_backward_begin(const BackwardPass& pass) = 0;
  /// watched[index].grad() is final for this pass: nothing still to run adds to it. Called exactly once per
  /// watched leaf and pass, in the order the leaves become final (undefined order among leaves final at once).
  virtual void on_gradient_ready(std::size_t index) = 0;
  /// A record's backward has run and its gradients are deposited; called between records, so keep it cheap
  /// (it is where communication started during the pass gets a chance to progress).
  virtual void on_record_done() {}
  /// The pass is over: completed (every watched leaf was reported; may throw) or ended by an exception
  /// (some leaves may not have been reported; must not throw).
  virtual void on_backward_end(bool completed) = 0;
};

/// Arms `observer` for the next backward() on the calling thread that accumulates into .grad (Tensor::backward,
/// autograd::backward; autograd::grad neither notifies nor consumes it). It is told about that one pass, then
/// disarmed. Arming an armed observer again does nothing. The tape holds it weakly: an observer destroyed
/// before that backward is skipped. Note: with nothing armed, backward costs one branch per pass.
void observe_next_backward(const std::shared_ptr<BackwardObserver>& observer);
/// Disarms `observer` on the calling thread if it is armed there.
void cancel_observation(const BackwardObserver* observer);
/// Whether `observer` is armed on the calling thread.
bool is_observing(const BackwardObserver* observer);

}  // namespace tapegrad::autograd

TAPEGRAD_API_END
