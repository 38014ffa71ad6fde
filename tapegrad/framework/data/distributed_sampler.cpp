#include <tapegrad/framework/data/distributed_sampler.h>

#include <numeric>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int ranks, int rank, bool shuffle, std::uint64_t seed,
                                       Remainder remainder)
    : dataset_size_(dataset_size), ranks_(ranks), rank_(rank), shuffle_(shuffle), seed_(seed) {
  if (dataset_size < 0) fail("DistributedSampler: dataset size must be non-negative, got {}", dataset_size);
  if (ranks < 1) fail("DistributedSampler: the number of ranks must be positive, got {}", ranks);
  if (rank < 0 || rank >= ranks) fail("DistributedSampler: rank {} is outside 0..{}", rank, ranks - 1);
  per_rank_ = remainder == Remainder::Drop ? dataset_size / ranks : (dataset_size + ranks - 1) / ranks;
  if (remainder == Remainder::Pad && dataset_size == 0) per_rank_ = 0;
}

std::vector<std::int64_t> DistributedSampler::indices(std::uint64_t epoch) const {
  std::vector<std::int64_t> order;
  if (shuffle_) {
    order = RandomSampler(dataset_size_, seed_).indices(epoch);
  } else {
    order.resize(static_cast<std::size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(per_rank_));
  // Note: position p of the padded (or truncated) order is order[p % size], so padding repeats from the start.
  for (std::int64_t i = 0; i < per_rank_; ++i) {
    const std::int64_t position = i * ranks_ + rank_;
    shard.push_back(order[static_cast<std::size_t>(position % dataset_size_)]);
  }
  return shard;
}

}  // namespace tapegrad::data
