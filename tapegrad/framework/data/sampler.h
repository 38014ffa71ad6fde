#pragma once
/// Index samplers: which examples an epoch visits, in which order.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/generator.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// The source of a DataLoader's indices. `indices(epoch)` must depend only on the sampler and the epoch,
/// so an epoch can be replayed (resuming a run) and a future distributed sampler can give each rank its
/// own shard of the same permutation.
class IndexSampler {
 public:
  virtual ~IndexSampler() = default;
  /// Number of indices each epoch yields.
  virtual std::int64_t size() const = 0;
  /// The indices to visit in `epoch`, in order.
  virtual std::vector<std::int64_t> indices(std::uint64_t epoch) const = 0;
};

/// 0, 1, ..., size-1 every epoch.
class SequentialSampler : public IndexSampler {
 public:
  explicit SequentialSampler(std::int64_t size);
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> indices(std::uint64_t epoch) const override;

 private:
  std::int64_t size_;
};

/// A fresh permutation of 0..size-1 each epoch, drawn from a Generator seeded by epoch_seed(seed, epoch).
class RandomSampler : public IndexSampler {
 public:
  RandomSampler(std::int64_t size, std::uint64_t seed);
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> indices(std::uint64_t epoch) const override;

 private:
  std::int64_t size_;
  std::uint64_t seed_;
};

/// A well-mixed seed for random stream `stream` of `epoch` of a run seeded with `seed` (SplitMix64), so
/// nearby seeds and epochs give unrelated streams.
std::uint64_t epoch_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream = 0);
/// Uniform integer in [0, bound), unbiased and identical on every platform (unlike std::uniform_int_distribution).
std::int64_t random_below(Generator& generator, std::int64_t bound);
/// A uniform random permutation of 0..n-1 (Fisher-Yates).
std::vector<std::int64_t> random_permutation(std::int64_t n, Generator& generator);

}  // namespace tapegrad::data

TAPEGRAD_API_END
