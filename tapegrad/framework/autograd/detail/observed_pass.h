#pragma once
// Internal: the tape's side of BackwardObserver (backward_observer.h), used by tape.cpp only.
#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include <tapegrad/framework/autograd/backward_observer.h>

namespace tapegrad {
struct AutogradMeta;
}

namespace tapegrad::autograd::detail {

/// True when some observer is armed on the calling thread: the one check a backward pass makes.
bool any_observer_armed();

/// One observed backward pass. Construction takes (and disarms) the calling thread's armed observers and asks
/// each for its leaves; tape.cpp then scans the records from last to first calling note_use for every input of
/// a record that can run, calls schedule(), deposits the seeds, calls ready_through(record count), then
/// record_done(i) after each record that ran, and finish() after the loop. The destructor reports an
/// unfinished pass (an exception) to the observers as not completed.
class ObservedPass {
 public:
  ObservedPass(const BackwardPass& pass, std::size_t record_count);
  ~ObservedPass();
  ObservedPass(const ObservedPass&) = delete;
  ObservedPass& operator=(const ObservedPass&) = delete;

  /// Whether `meta` is watched (the scan need not follow a leaf that is not).
  bool watches(const AutogradMeta* meta) const { return leaves_.count(meta) != 0; }
  /// `record` (scanned last to first) can run and takes the watched leaf `meta` as an input.
  void note_use(const AutogradMeta* meta, std::size_t record);
  /// Orders the notices by last use; call once, after the scan.
  void schedule();
  /// Reports every watched leaf whose last use is at or after `record` (record count: leaves no record uses).
  void ready_through(std::size_t record);
  /// Record `record` ran: reports the leaves it made final, then lets the observers progress.
  void record_done(std::size_t record);
  /// Reports the rest (leaves whose last use did not run after all), then ends the pass as completed.
  void finish();

 private:
  struct Watch {
    std::size_t observer;
    std::size_t leaf;
    std::size_t last_use;
  };
  std::vector<std::shared_ptr<BackwardObserver>> observers_;
  std::vector<Watch> watches_;                                              // sorted by last_use, descending
  std::unordered_map<const AutogradMeta*, std::vector<std::size_t>> leaves_;  // meta -> positions in watches_
  std::size_t next_ = 0;                                                    // first watch not reported yet
  bool ended_ = false;
};

}  // namespace tapegrad::autograd::detail
