// DistributedSampler: shards of one per-epoch order, disjoint and covering, equal sizes, pad or drop.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <map>

#include <tapegrad/framework/data/distributed_sampler.h>

using namespace tapegrad;
using data::DistributedSampler;
using data::Remainder;

namespace {
// Every rank's shard of `epoch`, in rank order.
std::vector<std::vector<std::int64_t>> shards(std::int64_t size, int ranks, bool shuffle, std::uint64_t seed,
                                              Remainder remainder, std::uint64_t epoch) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(DistributedSampler(size, ranks, r, shuffle, seed, remainder).indices(epoch));
  return out;
}
}  // namespace

TEST_CASE("without shuffle rank r takes every ranks-th index from r, padding from the start") {
  CHECK(DistributedSampler(7, 3, 0, false).indices(0) == std::vector<std::int64_t>{0, 3, 6});
  CHECK(DistributedSampler(7, 3, 1, false).indices(0) == std::vector<std::int64_t>{1, 4, 0});
  CHECK(DistributedSampler(7, 3, 2, false).indices(0) == std::vector<std::int64_t>{2, 5, 1});
  CHECK(DistributedSampler(7, 3, 2, false, 0, Remainder::Drop).indices(0) == std::vector<std::int64_t>{2, 5});
  CHECK(DistributedSampler(7, 3, 1, false, 0, Remainder::Drop).size() == 2);
}

TEST_CASE("bad ranks and sizes are errors naming the value") {
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2), Catch::Contains("rank 2 is outside 0..1"));
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("number of ranks must be positive, got 0"));
  CHECK_THROWS_WITH(DistributedSampler(-1, 2, 0), Catch::Contains("must be non-negative, got -1"));
}

TEST_CASE("the shards of an epoch have equal sizes and are disjoint (drop) or cover everything (pad)") {
  rc::prop("shards", [] {
  const auto size = *rc::gen::inRange<std::int64_t>(0, 60);
  const int ranks = *rc::gen::inRange(1, 6);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto epoch = *rc::gen::inRange<std::uint64_t>(0, 5);
  const bool shuffle = *rc::gen::arbitrary<bool>();
  for (Remainder remainder : {Remainder::Pad, Remainder::Drop}) {
    const auto all = shards(size, ranks, shuffle, seed, remainder, epoch);
    std::map<std::int64_t, int> seen;
    for (const auto& shard : all) {
      RC_ASSERT(shard.size() == all[0].size());
      RC_ASSERT(static_cast<std::int64_t>(shard.size()) ==
                DistributedSampler(size, ranks, 0, shuffle, seed, remainder).size());
      for (std::int64_t index : shard) {
        RC_ASSERT(index >= 0);
        RC_ASSERT(index < size);
        ++seen[index];
      }
    }
    if (remainder == Remainder::Drop) {
      RC_ASSERT(static_cast<std::int64_t>(seen.size()) == size / ranks * ranks);
      for (const auto& [index, count] : seen) RC_ASSERT(count == 1);
    } else {
      RC_ASSERT(static_cast<std::int64_t>(seen.size()) == size);
      const std::int64_t padded = size == 0 ? 0 : (size + ranks - 1) / ranks * ranks;
      std::int64_t total = 0;
      for (const auto& [index, count] : seen) total += count;
      RC_ASSERT(total == padded);
    }
  }
  });
}

TEST_CASE("with shuffle every rank derives the same order from (seed, epoch), and a new epoch reorders") {
  rc::prop("same order", [] {
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto epoch = *rc::gen::inRange<std::uint64_t>(0, 100);
  const auto first = shards(40, 2, true, seed, Remainder::Pad, epoch);
  RC_ASSERT(first == shards(40, 2, true, seed, Remainder::Pad, epoch));
  // Interleaving the two shards rebuilds RandomSampler's permutation for the same (seed, epoch).
  const auto order = data::RandomSampler(40, seed).indices(epoch);
  for (std::size_t i = 0; i < 20; ++i) {
    RC_ASSERT(first[0][i] == order[2 * i]);
    RC_ASSERT(first[1][i] == order[2 * i + 1]);
  }
  RC_ASSERT(shards(40, 2, true, seed, Remainder::Pad, epoch + 1) != first);
  });
}
