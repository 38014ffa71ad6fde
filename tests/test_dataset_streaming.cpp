// Streaming datasets: Dataset<Self> with get/size, .map(transform) chains, Stack collation, the image transforms,
// and StreamingDataLoader (workers, prefetch bound, order independent of the worker count, samplers, errors).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "support/doc_snippet.h"
#include "support/error_of.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
using namespace tapegrad;

// A dataset of your own: get(i) and size(), as libtorch's Dataset<Self>. get must be const and thread-safe.
class Squares : public data::Dataset<Squares> {
 public:
  data::Example get(std::int64_t i) const override {
    return {full({1, 2, 2}, static_cast<double>(i * i)), scalar_tensor(static_cast<double>(i % 2), DType::Int64)};
  }
  std::int64_t size() const override { return 100; }
};

std::int64_t count_squares() {
  auto dataset = Squares().map(data::transforms::Normalize(0.5, 2.0));
  auto loader = data::make_data_loader(
      std::move(dataset), data::StreamingLoaderOptions{}.with_batch_size(32).with_shuffle().with_seed(1).with_workers(2));
  std::int64_t seen = 0;
  for (data::Example& batch : *loader) seen += batch.target.size(0);  // data [B, 1, 2, 2], target [B]
  return seen;
}

// Images on disk, root/<class>/*.png|*.jpg, decoded and augmented by the loader's worker threads.
std::unique_ptr<data::StreamingDataLoader> image_loader(const std::string& root) {
  using namespace data::transforms;
  auto dataset = data::ImageFolder(root)  // data [H, W, 3] valued 0..255, target the class index
                     .map(ToTensor())     // [3, H, W] in [0, 1]
                     .map(RandomCrop(32, /*padding=*/4))
                     .map(RandomHorizontalFlip())
                     .map(Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}));
  return data::make_data_loader(
      std::move(dataset), data::StreamingLoaderOptions{}.with_batch_size(64).with_shuffle().with_workers(2));
}
// DOC-END

using namespace tapegrad::data;
using Catch::Matchers::Contains;
using tapegrad::testing::error_of;

namespace {

// Example i: data float32 [1, 4, 4] holding i*16 .. i*16+15, target int64 i. Counts its get() calls.
class Numbered : public Dataset<Numbered> {
 public:
  explicit Numbered(std::int64_t size, std::int64_t failing = -1) : size_(size), failing_(failing) {}
  Example get(std::int64_t index) const override {
    ++*calls_;
    if (index == failing_) fail("Numbered: example {} is damaged", index);
    Tensor data = empty({1, 4, 4});
    for (std::int64_t k = 0; k < 16; ++k) data.data<float>()[k] = static_cast<float>(index * 16 + k);
    Tensor target = empty({}, DType::Int64);
    target.data<std::int64_t>()[0] = index;
    return {data, target};
  }
  std::int64_t size() const override { return size_; }
  std::shared_ptr<std::atomic<int>> calls_ = std::make_shared<std::atomic<int>>(0);

 private:
  std::int64_t size_, failing_;
};

std::vector<std::int64_t> targets_of(const Example& batch) {
  const auto* t = batch.target.data<std::int64_t>();
  return {t, t + batch.target.numel()};
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

// Every batch of one epoch (data values and targets), for comparing runs.
std::vector<std::vector<float>> epoch_of(StreamingDataLoader& loader) {
  std::vector<std::vector<float>> out;
  for (Example& batch : loader) {
    out.push_back(values_of(batch.data));
    for (std::int64_t t : targets_of(batch)) out.back().push_back(static_cast<float>(t));
  }
  return out;
}

}  // namespace

TEST_CASE("a user dataset's get and size batch in order through Stack, the last batch short") {
  auto loader = make_data_loader(Numbered(10), StreamingLoaderOptions{}.with_batch_size(4));
  CHECK(loader->size() == 3);
  std::vector<std::vector<std::int64_t>> seen;
  for (Example& batch : *loader) {
    CHECK(batch.data.shape() == Shape{static_cast<std::int64_t>(targets_of(batch).size()), 1, 4, 4});
    CHECK(batch.data.data<float>()[16] == static_cast<float>(targets_of(batch)[1] * 16));
    seen.push_back(targets_of(batch));
  }
  CHECK(seen == std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  auto dropping = make_data_loader(Numbered(10), StreamingLoaderOptions{}.with_batch_size(4).with_drop_last());
  CHECK(dropping->size() == 2);
}

TEST_CASE("map chains apply transforms in order and Stack maps to nothing") {
  const auto mapped = Numbered(3)
                          .map(transforms::TensorLambda([](Tensor x) { return x * 2.0; }))
                          .map(transforms::Lambda([](Example e) {
                            e.data = e.data + 1.0;
                            return e;
                          }))
                          .map(transforms::Stack());
  CHECK(mapped.size() == 3);
  CHECK(mapped.get(2).data.data<float>()[1] == (2 * 16 + 1) * 2.0f + 1.0f);
  const auto batch = transforms::Stack()(mapped.get_batch({2, 0}));
  CHECK(batch.data.shape() == Shape{2, 1, 4, 4});
  CHECK(targets_of(batch) == std::vector<std::int64_t>{2, 0});
}

TEST_CASE("Stack refuses examples of different shapes, naming both") {
  std::vector<Example> examples{{zeros({2, 3}), zeros({})}, {zeros({3, 2}), zeros({})}};
  const std::string message = error_of([&] { transforms::Stack()(examples); });
  CHECK_THAT(message, Contains("example 1 has data float32 [3, 2]") && Contains("example 0 has float32 [2, 3]"));
  CHECK_THAT(error_of([] { transforms::Stack()({}); }), Contains("at least one example"));
}

TEST_CASE("batches and their random augmentation depend on the seed, not on the number of workers") {
  auto augmented = [] {
    return Numbered(37).map(transforms::RandomCrop(4, /*padding=*/2, /*fill=*/-1.0)).map(transforms::RandomHorizontalFlip());
  };
  auto options = StreamingLoaderOptions{}.with_batch_size(5).with_shuffle().with_seed(7);
  auto serial = make_data_loader(augmented(), options);
  const auto reference = epoch_of(*serial);
  REQUIRE(reference.size() == 8);
  for (int workers : {1, 2, 3}) {
    auto parallel = make_data_loader(augmented(), StreamingLoaderOptions(options).with_workers(workers).with_prefetch(1));
    CHECK(epoch_of(*parallel) == reference);
  }
  // A second epoch is another permutation and other crops; set_epoch(0) replays the first exactly.
  const auto second = epoch_of(*serial);
  CHECK(second != reference);
  serial->set_epoch(0);
  CHECK(epoch_of(*serial) == reference);
  auto other_seed = make_data_loader(augmented(), StreamingLoaderOptions(options).with_seed(8));
  CHECK(epoch_of(*other_seed) != reference);
}

TEST_CASE("workers build at most workers x prefetch batches ahead of the one in use") {
  Numbered dataset(100);
  auto calls = dataset.calls_;
  auto loader = make_data_loader(std::move(dataset), StreamingLoaderOptions{}.with_batch_size(1).with_workers(2).with_prefetch(1));
  auto it = loader->begin();  // holds batch 0; the window allows batches 0 and 1
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(calls->load() <= 2);
  ++it;  // now batch 1 is in use: batches up to 2 may be built
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(calls->load() <= 3);
  CHECK(targets_of(*it) == std::vector<std::int64_t>{1});
}

TEST_CASE("an error in a worker surfaces at its batch, and the loader can start again") {
  for (int workers : {0, 2}) {
    auto loader = make_data_loader(Numbered(20, /*failing=*/9), StreamingLoaderOptions{}.with_batch_size(4).with_workers(workers));
    std::vector<std::int64_t> seen;
    const std::string message = error_of([&] {
      for (Example& batch : *loader)
        for (std::int64_t t : targets_of(batch)) seen.push_back(t);
    });
    CHECK_THAT(message, Contains("Numbered: example 9 is damaged"));
    CHECK(seen == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
    auto it = loader->begin();
    CHECK(targets_of(*it) == std::vector<std::int64_t>{0, 1, 2, 3});
  }
}

TEST_CASE("leaving an epoch early and destroying a loader with running workers returns promptly") {
  auto loader = make_data_loader(Numbered(1000), StreamingLoaderOptions{}.with_batch_size(2).with_workers(2));
  int steps = 0;
  for (Example& batch : *loader) {
    (void)batch;
    if (++steps == 3) break;
  }
  auto it = loader->begin();  // a new epoch stops the old one's workers first
  CHECK(targets_of(*it) == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("samplers: sequential, random and a distributed shard drive the streaming loader") {
  auto sequential = make_data_loader<SequentialSampler>(Numbered(6), StreamingLoaderOptions{}.with_batch_size(6));
  CHECK(targets_of(*sequential->begin()) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
  auto random = make_data_loader<RandomSampler>(Numbered(6), StreamingLoaderOptions{}.with_batch_size(6).with_seed(3));
  CHECK(targets_of(*random->begin()) == RandomSampler(6, 3).indices(0));
  std::vector<std::int64_t> both;
  for (int rank : {0, 1}) {
    auto shard = make_data_loader(Numbered(7), std::make_shared<DistributedSampler>(7, 2, rank, true, 5, Remainder::Drop),
                                  StreamingLoaderOptions{}.with_batch_size(10).with_workers(1));
    const auto targets = targets_of(*shard->begin());
    CHECK(targets == DistributedSampler(7, 2, rank, true, 5, Remainder::Drop).indices(0));
    both.insert(both.end(), targets.begin(), targets.end());
  }
  std::sort(both.begin(), both.end());
  CHECK(std::adjacent_find(both.begin(), both.end()) == both.end());
  CHECK(both.size() == 6);
}

TEST_CASE("the streaming loader refuses bad options and bad sampler indices") {
  CHECK_THAT(error_of([] { make_data_loader(Numbered(3), StreamingLoaderOptions{}.with_batch_size(0)); }),
             Contains("batch_size must be positive"));
  CHECK_THAT(error_of([] { make_data_loader(Numbered(3), StreamingLoaderOptions{}.with_workers(-1)); }),
             Contains("workers must be non-negative"));
  auto loader = make_data_loader(Numbered(3), std::make_shared<SequentialSampler>(5));
  CHECK_THAT(error_of([&] { loader->begin(); }), Contains("index 3 for epoch 0, the dataset has 3 examples"));
}

TEST_CASE("ToTensor, Normalize, RandomCrop, RandomHorizontalFlip on known pixels") {
  Generator generator(1);
  // [H=1, W=2, C=3] valued 0..255 -> [3, 1, 2] / 255
  Tensor hwc = from_vector(std::vector<float>{0, 51, 255, 102, 153, 204}, {1, 2, 3});
  Tensor chw = transforms::ToTensor().apply(hwc, generator);
  CHECK(chw.shape() == Shape{3, 1, 2});
  CHECK(values_of(chw) == std::vector<float>{0, 102 / 255.f, 51 / 255.f, 153 / 255.f, 1, 204 / 255.f});
  Tensor normalized = transforms::Normalize({0.5, 0.0, 1.0}, {0.5, 1.0, 2.0}).apply(chw, generator);
  CHECK(values_of(normalized)[0] == Approx(-1.0));
  CHECK(values_of(normalized)[5] == Approx((204 / 255.0 - 1.0) / 2.0));
  CHECK_THAT(error_of([&] { transforms::Normalize({0.5, 0.5}, {1.0, 1.0}).apply(chw, generator); }),
             Contains("2 means for an image of 3 channels"));
  CHECK_THAT(error_of([] { transforms::Normalize(0.0, 0.0); }), Contains("positive"));

  // A 2x2 crop of a 2x2 image padded by 1: every window keeps the pixels' relative places, the rest is fill.
  Tensor image = from_vector(std::vector<float>{1, 2, 3, 4}, {1, 2, 2});
  std::set<std::vector<float>> windows;
  for (int i = 0; i < 200; ++i) windows.insert(values_of(transforms::RandomCrop(2, 1, -5.0).apply(image, generator)));
  CHECK(windows.size() == 9);  // all 3 x 3 offsets occur
  CHECK(windows.count({-5, -5, -5, 1}) == 1);
  CHECK(windows.count({1, 2, 3, 4}) == 1);
  CHECK(windows.count({4, -5, -5, -5}) == 1);
  int flipped = 0;
  for (int i = 0; i < 200; ++i) flipped += values_of(transforms::RandomHorizontalFlip().apply(image, generator))[0] == 2;
  CHECK(flipped > 60);
  CHECK(flipped < 140);
  CHECK(values_of(transforms::RandomHorizontalFlip(1.0).apply(image, generator)) == std::vector<float>{2, 1, 4, 3});
  CHECK_THAT(error_of([&] { transforms::RandomCrop(5).apply(image, generator); }), Contains("does not fit"));
  CHECK_THAT(error_of([&] { transforms::ToTensor().apply(image.reshape({4}), generator); }), Contains("[H, W, C]"));
}

TEST_CASE("Resize is bilinear with torch's align_corners=false sampling") {
  Generator generator(0);
  // Reference: /usr/bin/python3 (torch 1.13), x = torch.arange(12.).reshape(1, 1, 3, 4);
  // F.interpolate(x, size=SIZE, mode="bilinear", align_corners=False).flatten().tolist()
  const Tensor image = arange(0.0, 12.0, 1.0).reshape({1, 3, 4});
  auto check = [&](const transforms::Resize& resize, const Shape& shape, const std::vector<float>& expected) {
    const Tensor got = resize.apply(image, generator);
    CHECK(got.shape() == shape);
    const auto values = values_of(got);
    REQUIRE(values.size() == expected.size());
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(values[i] == Approx(expected[i]).margin(1e-5));
  };
  // size=(2, 5): rows shrink, columns grow
  check(transforms::Resize(2, 5), {1, 2, 5}, {1.0, 1.7, 2.5, 3.3, 4.0, 7.0, 7.7, 8.5, 9.3, 10.0});
  // size=(6, 2): rows grow (clamped at both edges), columns shrink
  check(transforms::Resize(6, 2), {1, 6, 2}, {0.5, 2.5, 1.5, 3.5, 3.5, 5.5, 5.5, 7.5, 7.5, 9.5, 8.5, 10.5});
  // Resize(5): the shorter side (3) becomes 5, the longer int(5 * 4 / 3) = 6, as torchvision; size=(5, 6)
  check(transforms::Resize(5), {1, 5, 6},
        {0.0, 0.5, 1.1666667, 1.8333334, 2.5, 3.0, 1.6, 2.1, 2.7666669, 3.4333334, 4.1, 4.6, 4.0, 4.5, 5.1666665,
         5.8333335, 6.5, 7.0, 6.4, 6.9, 7.5666666, 8.233334, 8.9, 9.4, 8.0, 8.5, 9.166666, 9.833333, 10.5, 11.0});
}

TEST_CASE("docs/data.md's streaming example runs, and the page quotes it") {
  CHECK(count_squares() == 100);
  CHECK_THAT(error_of([] { image_loader("/nonexistent/root"); }), Contains("is not a directory"));
  tapegrad::testing::check_doc_quotes_snippet("tests/test_dataset_streaming.cpp", "docs/data.md");
}
