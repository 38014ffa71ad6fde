#pragma once
/// StreamingDataLoader: batches of a DatasetBase built by worker threads ahead of use, in a fixed order per seed.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include <tapegrad/framework/data/sampler.h>
#include <tapegrad/framework/data/stream_dataset.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// How a StreamingDataLoader batches (the first four as DataLoaderOptions).
struct StreamingLoaderOptions {
  std::int64_t batch_size = 64;
  /// Visit a new random permutation each epoch (ignored when the loader is given its own sampler).
  bool shuffle = false;
  bool drop_last = false;
  /// Seeds the shuffle and every random transform; epoch e uses streams derived from (seed, e).
  std::uint64_t seed = 0;
  /// Threads that build batches ahead of the training loop; 0 builds each batch on the calling thread.
  int workers = 0;
  /// Batches each worker may have ready or in progress ahead of the one in use (PyTorch's prefetch_factor).
  int prefetch = 2;

  StreamingLoaderOptions& with_batch_size(std::int64_t b) { batch_size = b; return *this; }
  StreamingLoaderOptions& with_shuffle(bool s = true) { shuffle = s; return *this; }
  StreamingLoaderOptions& with_drop_last(bool d = true) { drop_last = d; return *this; }
  StreamingLoaderOptions& with_seed(std::uint64_t s) { seed = s; return *this; }
  StreamingLoaderOptions& with_workers(int w) { workers = w; return *this; }
  StreamingLoaderOptions& with_prefetch(int p) { prefetch = p; return *this; }
};

/// Iterates collated batches (transforms::Stack): `for (Example& batch : *loader) { batch.data ... batch.target }`.
/// Note: batch k of an epoch holds the examples at positions [k*B, (k+1)*B) of the sampler's order for that
/// epoch, each transformed with a generator seeded by (seed, epoch, position), whichever worker builds it; so
/// the batches, their order and their augmentation depend on the seed alone, not on `workers` or timing. At most
/// workers * prefetch batches are built ahead. An exception thrown while building batch k (a damaged file)
/// is rethrown by the ++ that reaches batch k. As DataLoader: each begin() starts epoch epoch() and advances it,
/// set_epoch(e) replays epoch e, and one iteration runs at a time (a new begin() stops the previous one).
class StreamingDataLoader {
 public:
  StreamingDataLoader(std::shared_ptr<const DatasetBase> dataset, StreamingLoaderOptions options = {});
  StreamingDataLoader(std::shared_ptr<const DatasetBase> dataset, std::shared_ptr<const IndexSampler> sampler,
                      StreamingLoaderOptions options = {});
  ~StreamingDataLoader();
  StreamingDataLoader(const StreamingDataLoader&) = delete;
  StreamingDataLoader& operator=(const StreamingDataLoader&) = delete;

  /// Number of batches per epoch.
  std::int64_t size() const;
  std::uint64_t epoch() const { return next_epoch_; }
  void set_epoch(std::uint64_t epoch) { next_epoch_ = epoch; }
  const DatasetBase& dataset() const { return *dataset_; }
  const StreamingLoaderOptions& options() const { return options_; }

  struct Sentinel {};
  /// Input iterator over one epoch's batches.
  class Iterator {
   public:
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    Example& operator*() const { return loader_->batch_; }
    Example* operator->() const { return &loader_->batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(Sentinel) const;

   private:
    friend class StreamingDataLoader;
    explicit Iterator(StreamingDataLoader* loader) : loader_(loader) {}
    StreamingDataLoader* loader_;
    std::int64_t position_ = 0;
  };
  /// Stops the epoch in progress (if any), starts epoch epoch() and its workers, waits for its first batch.
  Iterator begin();
  Sentinel end() const { return {}; }

 private:
  struct Run;
  void stop();
  void load(std::int64_t position);

  std::shared_ptr<const DatasetBase> dataset_;
  std::shared_ptr<const IndexSampler> sampler_;
  StreamingLoaderOptions options_;
  std::uint64_t next_epoch_ = 0;
  std::int64_t batches_ = 0;
  std::unique_ptr<Run> run_;
  Example batch_;
};

/// A loader over `dataset` (moved or copied into shared ownership), as libtorch's `make_data_loader`.
/// `Sampler` may be RandomSampler or SequentialSampler (built for the dataset's size and options.seed), or
/// left out: then options.shuffle chooses. Note: libtorch's default is RandomSampler; here it is shuffle=false.
template <class Sampler = void, class D>
std::unique_ptr<StreamingDataLoader> make_data_loader(D&& dataset, StreamingLoaderOptions options = {}) {
  auto shared = std::make_shared<std::decay_t<D>>(std::forward<D>(dataset));
  if constexpr (std::is_same_v<Sampler, RandomSampler>) {
    auto sampler = std::make_shared<RandomSampler>(shared->size(), options.seed);
    return std::make_unique<StreamingDataLoader>(std::move(shared), std::move(sampler), options);
  } else if constexpr (std::is_same_v<Sampler, SequentialSampler>) {
    auto sampler = std::make_shared<SequentialSampler>(shared->size());
    return std::make_unique<StreamingDataLoader>(std::move(shared), std::move(sampler), options);
  } else {
    static_assert(std::is_void_v<Sampler>, "make_data_loader<Sampler>: RandomSampler or SequentialSampler; pass "
                                           "any other IndexSampler as the second argument");
    return std::make_unique<StreamingDataLoader>(std::move(shared), options);
  }
}

/// A loader over `dataset` that visits the indices `sampler` yields (e.g. a DistributedSampler's shard).
template <class D>
std::unique_ptr<StreamingDataLoader> make_data_loader(D&& dataset, std::shared_ptr<const IndexSampler> sampler,
                                                      StreamingLoaderOptions options = {}) {
  return std::make_unique<StreamingDataLoader>(std::make_shared<std::decay_t<D>>(std::forward<D>(dataset)),
                                               std::move(sampler), options);
}

}  // namespace tapegrad::data

TAPEGRAD_API_END
