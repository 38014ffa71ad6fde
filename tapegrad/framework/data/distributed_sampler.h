#pragma once
/// DistributedSampler: each rank's disjoint shard of the same per-epoch order.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/data/sampler.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// What a DistributedSampler does with a dataset size that the number of ranks does not divide.
enum class Remainder {
  /// Repeat indices from the start of the epoch's order so every rank gets ceil(size / ranks) (PyTorch's default).
  Pad,
  /// Leave out the last size % ranks indices of the epoch's order, so every rank gets floor(size / ranks).
  Drop,
};

/// Note: every rank builds the same order for an epoch (RandomSampler's permutation for (seed, epoch), or
/// 0..size-1 without shuffle) and takes every ranks-th index from position `rank`, so the shards are disjoint
/// (with Drop; with Pad only the repeated indices appear twice), cover the dataset, and have equal sizes, which
/// keeps the ranks' step counts equal. It needs no communication, so it is part of the core library.
class DistributedSampler : public IndexSampler {
 public:
  DistributedSampler(std::int64_t dataset_size, int ranks, int rank, bool shuffle = true, std::uint64_t seed = 0,
                     Remainder remainder = Remainder::Pad);
  std::int64_t size() const override { return per_rank_; }
  std::vector<std::int64_t> indices(std::uint64_t epoch) const override;

 private:
  std::int64_t dataset_size_;
  int ranks_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t per_rank_;
};

}  // namespace tapegrad::data

TAPEGRAD_API_END
