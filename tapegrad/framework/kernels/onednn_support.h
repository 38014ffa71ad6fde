#pragma once
// Internal: what the oneDNN-backed kernels share: the CPU engine, a stream per thread, the attribute that makes a
// primitive take its scratchpad from the caller, and a bounded least-recently-used cache of primitives.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tapegrad::kernels::onednn {

const dnnl::engine& cpu_engine();

/// This thread's stream on cpu_engine(). Note: oneDNN's CPU stream is in-order and, with the OpenMP runtime,
/// executes synchronously.
dnnl::stream& thread_stream();

/// A primitive attribute with the scratchpad in user mode: each call passes a scratchpad from tapegrad's block
/// cache instead of oneDNN allocating its own, so a steady-state step touches no fresh pages and concurrent calls
/// never share one.
dnnl::primitive_attr user_scratchpad();

/// The oneDNN thread count a primitive created now works for: 1 inside an OpenMP parallel region (oneDNN runs
/// nested calls serially), else omp_get_max_threads(). Note: a jit primitive fixes its work split for the thread
/// count current when it is created, so this is part of every cache key: after set_num_threads(2) a new
/// primitive really uses two threads.
int primitive_threads();

/// A least-recently-used map from Key to an immutable Value, at most `capacity` entries.
/// Note: bounded because a program that sees many shapes (variable batch or image sizes, a shape sweep) would
/// otherwise keep every primitive's JIT code alive. A value is shared by pointer, so a call keeps using it while
/// another thread evicts it; oneDNN primitives may execute concurrently from several threads.
template <class Key, class Value, class Hash>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}

  /// The value of `key`, built by `build(key)` (returning std::shared_ptr<const Value>) on a miss.
  template <class Build>
  std::shared_ptr<const Value> get(const Key& key, Build build) {
    {
      std::lock_guard lock(mutex_);
      if (auto found = map_.find(key); found != map_.end()) {
        order_.splice(order_.begin(), order_, found->second.second);
        return found->second.first;
      }
    }
    // Note: built outside the lock (creating a primitive JIT-compiles, ~milliseconds); two threads that miss the
    // same key both build, and the first insertion wins.
    std::shared_ptr<const Value> value = build(key);
    std::lock_guard lock(mutex_);
    if (auto found = map_.find(key); found != map_.end()) return found->second.first;
    order_.push_front(key);
    map_.emplace(key, std::make_pair(value, order_.begin()));
    if (map_.size() > capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return value;
  }

  std::size_t size() {
    std::lock_guard lock(mutex_);
    return map_.size();
  }
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  std::mutex mutex_;
  std::list<Key> order_;  // most recently used first
  std::unordered_map<Key, std::pair<std::shared_ptr<const Value>, typename std::list<Key>::iterator>, Hash> map_;
};

}  // namespace tapegrad::kernels::onednn
