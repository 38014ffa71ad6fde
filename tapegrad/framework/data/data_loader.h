#pragma once
/// DataLoader: mini-batches over a TensorDataset, shuffled and augmented reproducibly per epoch.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <tapegrad/framework/data/augment.h>
#include <tapegrad/framework/data/dataset.h>
#include <tapegrad/framework/data/sampler.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// How a DataLoader batches.
struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  /// Visit a new random permutation each epoch (ignored when the loader is given its own sampler).
  bool shuffle = false;
  /// Drop the last batch when it is smaller than batch_size.
  bool drop_last = false;
  /// Seeds the shuffle and the augmentation; epoch e uses streams derived from (seed, e).
  std::uint64_t seed = 0;
  Augmentation augmentation{};

  DataLoaderOptions& with_batch_size(std::int64_t b) { batch_size = b; return *this; }
  DataLoaderOptions& with_shuffle(bool s = true) { shuffle = s; return *this; }
  DataLoaderOptions& with_drop_last(bool d = true) { drop_last = d; return *this; }
  DataLoaderOptions& with_seed(std::uint64_t s) { seed = s; return *this; }
  DataLoaderOptions& with_augmentation(const Augmentation& a) { augmentation = a; return *this; }
};

/// Iterates mini-batches: `for (auto& batch : loader) { ... batch.images ... batch.labels ... }`.
/// Note: each begin() starts epoch `epoch()` and then advances it, so consecutive loops see new
/// permutations; set_epoch(e) replays epoch e exactly (same order, same augmentation). One iteration at
/// a time: a new begin() restarts the loader, and the batch a reference points at is replaced by ++.
class DataLoader {
 public:
  /// Batches `dataset` in order, or in a fresh random order per epoch when options.shuffle.
  explicit DataLoader(TensorDataset dataset, DataLoaderOptions options = {});
  /// Batches the indices `sampler` yields (e.g. one rank's shard); options.shuffle is ignored.
  DataLoader(TensorDataset dataset, std::shared_ptr<const IndexSampler> sampler, DataLoaderOptions options = {});

  /// Number of batches per epoch.
  std::int64_t size() const;
  /// The epoch the next begin() produces.
  std::uint64_t epoch() const { return next_epoch_; }
  void set_epoch(std::uint64_t epoch) { next_epoch_ = epoch; }
  const TensorDataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  /// End marker of an epoch.
  struct Sentinel {};
  /// Input iterator over one epoch's batches.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch& operator*() const { return loader_->batch_; }
    Batch* operator->() const { return &loader_->batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(Sentinel) const { return position_ >= loader_->batches_; }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader) : loader_(loader) {}
    DataLoader* loader_;
    std::int64_t position_ = 0;
  };
  /// Starts epoch epoch() (computing its order and its first batch), then advances epoch().
  Iterator begin();
  Sentinel end() const { return {}; }

 private:
  void load_batch(std::int64_t position);

  TensorDataset dataset_;
  std::shared_ptr<const IndexSampler> sampler_;
  DataLoaderOptions options_;
  std::uint64_t next_epoch_ = 0;
  // The epoch in progress.
  std::vector<std::int64_t> order_;
  std::int64_t batches_ = 0;
  Generator augment_generator_;
  Batch batch_;
};

}  // namespace tapegrad::data

TAPEGRAD_API_END
