#include <tapegrad/framework/detail/seed_mix.h>
#include <tapegrad/framework/data/sampler.h>

#include <numeric>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {

SequentialSampler::SequentialSampler(std::int64_t size) : size_(size) {
  if (size < 0) fail("SequentialSampler: size must be non-negative, got {}", size);
}

std::vector<std::int64_t> SequentialSampler::indices(std::uint64_t) const {
  std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  return all;
}

RandomSampler::RandomSampler(std::int64_t size, std::uint64_t seed) : size_(size), seed_(seed) {
  if (size < 0) fail("RandomSampler: size must be non-negative, got {}", size);
}

std::vector<std::int64_t> RandomSampler::indices(std::uint64_t epoch) const {
  Generator generator(epoch_seed(seed_, epoch));
  return random_permutation(size_, generator);
}


std::uint64_t epoch_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream) {
  return tapegrad::detail::splitmix64(tapegrad::detail::splitmix64(tapegrad::detail::splitmix64(seed) ^ epoch) ^ stream);
}

std::int64_t random_below(Generator& generator, std::int64_t bound) {
  if (bound <= 0) fail("random_below: bound must be positive, got {}", bound);
  return static_cast<std::int64_t>(generator.below(static_cast<std::uint64_t>(bound)));
}

std::vector<std::int64_t> random_permutation(std::int64_t n, Generator& generator) {
  if (n < 0) fail("random_permutation: n must be non-negative, got {}", n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[random_below(generator, i + 1)]);
  return order;
}

}  // namespace tapegrad::data
