// Backward observers: armed per thread, consumed by the next backward pass that accumulates into .grad.
#include <tapegrad/framework/autograd/backward_observer.h>
#include <tapegrad/framework/autograd/detail/observed_pass.h>

#include <algorithm>
#include <exception>

#include <tapegrad/framework/detail/tensor_impl.h>

namespace tapegrad::autograd {

namespace {

struct Armed {
  const BackwardObserver* raw;  // identity, also once the observer is gone
  std::weak_ptr<BackwardObserver> observer;
};

std::vector<Armed>& armed() {
  thread_local std::vector<Armed> list;
  return list;
}

}  // namespace

void observe_next_backward(const std::shared_ptr<BackwardObserver>& observer) {
  if (!observer) fail("observe_next_backward: the observer is null");
  if (is_observing(observer.get())) return;
  armed().push_back(Armed{observer.get(), observer});
}

void cancel_observation(const BackwardObserver* observer) {
  auto& list = armed();
  list.erase(std::remove_if(list.begin(), list.end(), [&](const Armed& a) { return a.raw == observer; }), list.end());
}

bool is_observing(const BackwardObserver* observer) {
  for (const Armed& a : armed())
    if (a.raw == observer) return true;
  return false;
}

namespace detail {

bool any_observer_armed() { return !armed().empty(); }

ObservedPass::ObservedPass(const BackwardPass& pass, std::size_t record_count) {
  std::vector<Armed> taken;
  taken.swap(armed());  // disarmed before anything can throw: a pass consumes them whatever happens
  try {
    for (const Armed& a : taken) {
      std::shared_ptr<BackwardObserver> observer = a.observer.lock();
      if (!observer) continue;
      const std::vector<Tensor>& leaves = observer->on_backward_begin(pass);
      observers_.push_back(observer);
      for (std::size_t j = 0; j < leaves.size(); ++j) {
        // Note: a tensor that is not a leaf requiring grad never receives a .grad, so it is final already.
        const Tensor& leaf = leaves[j];
        const AutogradMeta* meta = leaf.defined() ? leaf.impl()->autograd.get() : nullptr;
        if (meta && meta->is_leaf) leaves_[meta].push_back(watches_.size());
        watches_.push_back(Watch{observers_.size() - 1, j, record_count});
      }
    }
  } catch (...) {
    for (const auto& observer : observers_) observer->on_backward_end(false);
    throw;
  }
}

ObservedPass::~ObservedPass() {
  if (ended_) return;
  for (const auto& observer : observers_) {
    try {
      observer->on_backward_end(false);
    } catch (...) {  // an unwinding pass cannot report a second error
    }
  }
}

void ObservedPass::note_use(const AutogradMeta* meta, std::size_t record) {
  const auto found = leaves_.find(meta);
  if (found == leaves_.end()) return;
  for (std::size_t position : found->second) watches_[position].last_use = record;  // scanned last to first
}

void ObservedPass::schedule() {
  std::stable_sort(watches_.begin(), watches_.end(),
                   [](const Watch& a, const Watch& b) { return a.last_use > b.last_use; });
  leaves_.clear();
}

void ObservedPass::ready_through(std::size_t record) {
  while (next_ < watches_.size() && watches_[next_].last_use >= record) {
    const Watch& watch = watches_[next_++];
    observers_[watch.observer]->on_gradient_ready(watch.leaf);
  }
}

void ObservedPass::record_done(std::size_t record) {
  ready_through(record);
  for (const auto& observer : observers_) observer->on_record_done();
}

void ObservedPass::finish() {
  ready_through(0);
  ended_ = true;
  std::exception_ptr first_error;
  for (const auto& observer : observers_) {
    try {
      observer->on_backward_end(true);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace detail
}  // namespace tapegrad::autograd
