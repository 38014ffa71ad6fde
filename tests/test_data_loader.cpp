// DataLoader: batching, drop_last, shuffling and its seeds, custom samplers, and augmentation.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "support/error_of.h"
#include "support/numbered_dataset.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::data;
using Catch::Matchers::Contains;
using tapegrad::testing::epoch_labels;
using tapegrad::testing::error_of;
using tapegrad::testing::numbered_dataset;

// ---------------------------------------------------------------- DataLoader

TEST_CASE("without shuffle, batches visit the examples in order and the last one is partial") {
  DataLoader loader(numbered_dataset(10), DataLoaderOptions{}.with_batch_size(4));
  CHECK(loader.size() == 3);
  std::vector<std::int64_t> sizes;
  for (auto& batch : loader) {
    sizes.push_back(batch.labels.numel());
    CHECK(batch.images.shape() == Shape{batch.labels.numel(), 1, 3, 3});
    CHECK(batch.images.dtype() == DType::Float32);
    CHECK(batch.labels.dtype() == DType::Int64);
  }
  CHECK(sizes == std::vector<std::int64_t>{4, 4, 2});
  std::vector<std::int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(epoch_labels(loader) == expected);
}

TEST_CASE("drop_last drops only an incomplete final batch") {
  DataLoader partial(numbered_dataset(10), DataLoaderOptions{}.with_batch_size(4).with_drop_last());
  CHECK(partial.size() == 2);
  CHECK(epoch_labels(partial) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  DataLoader exact(numbered_dataset(8), DataLoaderOptions{}.with_batch_size(4).with_drop_last());
  CHECK(exact.size() == 2);
  CHECK(epoch_labels(exact).size() == 8);
  DataLoader too_few(numbered_dataset(3), DataLoaderOptions{}.with_batch_size(4).with_drop_last());
  CHECK(too_few.size() == 0);
  CHECK(epoch_labels(too_few).empty());
}

TEST_CASE("a shuffled epoch visits every example exactly once, in a new order each epoch") {
  DataLoader loader(numbered_dataset(103), DataLoaderOptions{}.with_batch_size(10).with_shuffle().with_seed(7));
  std::vector<std::int64_t> sorted(103);
  std::iota(sorted.begin(), sorted.end(), 0);
  std::set<std::vector<std::int64_t>> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    CHECK(loader.epoch() == static_cast<std::uint64_t>(epoch));
    std::vector<std::int64_t> labels = epoch_labels(loader);
    orders.insert(labels);
    CHECK(labels != sorted);
    std::sort(labels.begin(), labels.end());
    CHECK(labels == sorted);
  }
  CHECK(orders.size() == 4);
}

TEST_CASE("equal seeds shuffle identically, different seeds differently, and set_epoch replays an epoch") {
  auto options = DataLoaderOptions{}.with_batch_size(8).with_shuffle();
  DataLoader a(numbered_dataset(50), DataLoaderOptions(options).with_seed(1));
  DataLoader b(numbered_dataset(50), DataLoaderOptions(options).with_seed(1));
  DataLoader c(numbered_dataset(50), DataLoaderOptions(options).with_seed(2));
  const auto a0 = epoch_labels(a), a1 = epoch_labels(a);
  CHECK(epoch_labels(b) == a0);
  CHECK(epoch_labels(b) == a1);
  CHECK(epoch_labels(c) != a0);
  a.set_epoch(0);
  CHECK(epoch_labels(a) == a0);
  CHECK(a.epoch() == 1);
  DataLoader fresh(numbered_dataset(50), DataLoaderOptions(options).with_seed(1));
  fresh.set_epoch(1);
  CHECK(epoch_labels(fresh) == a1);
}

namespace {
/// One rank's share of a seeded permutation: the shape a distributed sampler will take.
class ShardSampler : public IndexSampler {
 public:
  ShardSampler(std::int64_t size, std::int64_t rank, std::int64_t ranks) : all_(size, 3), rank_(rank), ranks_(ranks) {}
  std::int64_t size() const override { return (all_.size() - rank_ + ranks_ - 1) / ranks_; }
  std::vector<std::int64_t> indices(std::uint64_t epoch) const override {
    std::vector<std::int64_t> all = all_.indices(epoch), mine;
    for (std::size_t i = static_cast<std::size_t>(rank_); i < all.size(); i += static_cast<std::size_t>(ranks_))
      mine.push_back(all[i]);
    return mine;
  }

 private:
  RandomSampler all_;
  std::int64_t rank_, ranks_;
};
}  // namespace

TEST_CASE("a custom sampler decides the indices, so shards of one permutation partition the data") {
  const auto options = DataLoaderOptions{}.with_batch_size(4);
  DataLoader rank0(numbered_dataset(21), std::make_shared<ShardSampler>(21, 0, 2), options);
  DataLoader rank1(numbered_dataset(21), std::make_shared<ShardSampler>(21, 1, 2), options);
  CHECK(rank0.size() == 3);
  CHECK(rank1.size() == 3);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::int64_t> both = epoch_labels(rank0), other = epoch_labels(rank1);
    CHECK(both.size() == 11);
    CHECK(other.size() == 10);
    both.insert(both.end(), other.begin(), other.end());
    std::sort(both.begin(), both.end());
    std::vector<std::int64_t> sorted(21);
    std::iota(sorted.begin(), sorted.end(), 0);
    CHECK(both == sorted);
  }
  CHECK_THAT(error_of([] { DataLoader(numbered_dataset(3), nullptr); }), Contains("DataLoader: expected a sampler"));
  CHECK_THAT(error_of([] { DataLoader(numbered_dataset(3), DataLoaderOptions{}.with_batch_size(0)); }),
             Contains("DataLoader: batch_size must be positive, got 0"));
}

TEST_CASE("random_permutation is a permutation and random_below stays in range") {
  Generator generator(11);
  for (std::int64_t n : {0, 1, 2, 17}) {
    std::vector<std::int64_t> order = random_permutation(n, generator);
    std::sort(order.begin(), order.end());
    std::vector<std::int64_t> sorted(static_cast<std::size_t>(n));
    std::iota(sorted.begin(), sorted.end(), 0);
    CHECK(order == sorted);
  }
  std::map<std::int64_t, int> counts;
  for (int i = 0; i < 3000; ++i) counts[random_below(generator, 3)]++;
  CHECK(counts.size() == 3);
  for (auto [value, count] : counts) {
    CHECK(value >= 0);
    CHECK(value < 3);
    CHECK(count > 850);  // expected 1000; a 5-sigma band
  }
  CHECK(epoch_seed(1, 0) != epoch_seed(1, 1));
  CHECK(epoch_seed(1, 0) != epoch_seed(2, 0));
  CHECK(epoch_seed(1, 0, 0) != epoch_seed(1, 0, 1));
}

// ---------------------------------------------------------------- augmentation

namespace {
/// The reference: image `source` [C, H, W] shifted by (dy, dx) with `fill` entering, then maybe mirrored.
std::vector<float> shifted(const float* source, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t dy,
                           std::int64_t dx, bool flip, float fill) {
  std::vector<float> out(static_cast<std::size_t>(c * h * w));
  for (std::int64_t k = 0; k < c; ++k)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) {
        const std::int64_t read_x = flip ? w - 1 - x : x;
        const std::int64_t sy = y + dy, sx = read_x + dx;
        out[(k * h + y) * w + x] = (sy < 0 || sy >= h || sx < 0 || sx >= w) ? fill : source[(k * h + sy) * w + sx];
      }
  return out;
}
}  // namespace

TEST_CASE("augmentation: each image is its padded random crop, maybe mirrored, and the draws vary") {
  Generator data_generator(5);
  const std::int64_t b = 40, c = 2, h = 5, w = 6, pad = 2;
  Tensor images = rand({b, c, h, w}, data_generator);
  Augmentation augmentation;
  augmentation.crop_padding = pad;
  augmentation.horizontal_flip = true;
  augmentation.fill = -3.0;
  Generator generator(9);
  Tensor out = augment(images, augmentation, generator);
  REQUIRE(out.shape() == images.shape());
  std::set<std::pair<std::int64_t, std::int64_t>> shifts;
  int flips = 0;
  for (std::int64_t i = 0; i < b; ++i) {
    const float* source = images.data<float>() + i * c * h * w;
    const std::vector<float> got(out.data<float>() + i * c * h * w, out.data<float>() + (i + 1) * c * h * w);
    bool matched = false;
    for (std::int64_t dy = -pad; dy <= pad && !matched; ++dy)
      for (std::int64_t dx = -pad; dx <= pad && !matched; ++dx)
        for (bool flip : {false, true})
          if (!matched && shifted(source, c, h, w, dy, dx, flip, -3.0f) == got) {
            matched = true;
            shifts.insert({dy, dx});
            flips += flip;
          }
    CHECK(matched);
  }
  CHECK(shifts.size() > 5);
  CHECK(flips > 5);
  CHECK(flips < 35);
}

TEST_CASE("augmentation with flip only mirrors or keeps each image; with nothing enabled it copies") {
  Generator data_generator(6);
  Tensor images = rand({30, 1, 4, 4}, data_generator);
  Augmentation flip_only;
  flip_only.horizontal_flip = true;
  Generator generator(1);
  Tensor out = augment(images, flip_only, generator);
  int flipped = 0;
  for (std::int64_t i = 0; i < 30; ++i) {
    const float* source = images.data<float>() + i * 16;
    const std::vector<float> got(out.data<float>() + i * 16, out.data<float>() + (i + 1) * 16);
    const bool same = got == shifted(source, 1, 4, 4, 0, 0, false, 0.0f);
    const bool mirrored = got == shifted(source, 1, 4, 4, 0, 0, true, 0.0f);
    CHECK(same != mirrored);
    flipped += mirrored;
  }
  CHECK(flipped > 3);
  CHECK(flipped < 27);
  Tensor copy = augment(images, Augmentation{}, generator);
  CHECK(copy.to_vector() == images.to_vector());
  CHECK_THAT(error_of([&] { augment(arange(3), flip_only, generator); }),
             Contains("augment: expected float32 images [B, C, H, W], got int64 [3]"));
}

TEST_CASE("DataLoader augmentation keeps shapes and labels and is reproducible per seed and epoch") {
  Generator data_generator(3);
  TensorDataset dataset(rand({20, 1, 6, 6}, data_generator), arange(20));
  Augmentation augmentation;
  augmentation.crop_padding = 1;
  augmentation.horizontal_flip = true;
  const auto options = DataLoaderOptions{}.with_batch_size(8).with_shuffle().with_augmentation(augmentation);
  auto collect = [](DataLoader& loader) {
    std::vector<double> values;
    for (auto& batch : loader) {
      CHECK(batch.images.shape() == Shape{batch.labels.numel(), 1, 6, 6});
      const auto v = batch.images.to_vector();
      values.insert(values.end(), v.begin(), v.end());
    }
    return values;
  };
  DataLoader a(dataset, DataLoaderOptions(options).with_seed(4));
  DataLoader b(dataset, DataLoaderOptions(options).with_seed(4));
  DataLoader c(dataset, DataLoaderOptions(options).with_seed(5));
  const auto a0 = collect(a), a1 = collect(a);
  CHECK(a0.size() == 20 * 36);
  CHECK(collect(b) == a0);
  CHECK(a1 != a0);
  CHECK(collect(c) != a0);
  a.set_epoch(1);
  CHECK(collect(a) == a1);
  // Shuffle off: the augmentation stream alone still differs between epochs.
  DataLoader ordered(dataset, DataLoaderOptions{}.with_batch_size(8).with_augmentation(augmentation));
  CHECK(collect(ordered) != collect(ordered));
  CHECK_THAT(error_of([&] { DataLoader(TensorDataset(zeros({2, 3}), arange(2)), options); }),
             Contains("DataLoader: augmentation needs float32 images [N, C, H, W], got float32 [2, 3]"));
}

