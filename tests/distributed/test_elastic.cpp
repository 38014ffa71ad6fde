// PeriodicCheckpointer on 2 ranks: a run interrupted mid-epoch and resumed into fresh objects continues bit for bit
// (model, optimizer, schedule, every rank's generator); time-based saves happen at the same step on every rank;
// what restore() does with generators of other world sizes; its errors; and docs/distributed.md's example.
// (The end-to-end test with a SIGKILLed rank and tools/tapegrad_run is elastic_restart.sh.)
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/elastic.h>
using namespace tapegrad;

// Data-parallel training that survives a killed rank: launch it with tools/tapegrad_run --max-restarts 3, and a
// restarted job continues from the last checkpoint (rank 0 writes one every 20 steps).
void train(std::shared_ptr<nn::Module> model, const data::TensorDataset& dataset, int epochs, const std::string& path) {
  const auto world = distributed::ProcessGroup::world();
  distributed::DistributedDataParallel ddp(model, world);
  optim::SGD optimizer(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  auto sampler = std::make_shared<data::DistributedSampler>(dataset.size(), world.world_size(), world.rank());
  data::DataLoader loader(dataset, sampler, data::DataLoaderOptions{}.with_batch_size(16));
  distributed::PeriodicCheckpointer checkpointer(world, {.path = path, .every_steps = 20});
  checkpointer.track(*model).track(optimizer).track("default", default_generator());
  checkpointer.resume();  // on every rank: continues from the file when there is one
  for (; checkpointer.epoch() < epochs; checkpointer.epoch_done()) {
    for (auto& batch : checkpointer.remaining_batches(loader)) {  // the epoch's batches not trained yet
      optimizer.zero_grad();
      cross_entropy(ddp.forward(batch.images), batch.labels).backward();
      ddp.synchronize_gradients();
      optimizer.step();
      checkpointer.step_done();  // counts the step; every 20th, saves (a collective)
    }
  }
}
// DOC-END

#include <tapegrad/framework/distributed/sync_batch_norm.h>

using distributed::PeriodicCheckpointer;
using distributed::ProcessGroup;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * element_size(a.dtype())) == 0;
}

void require_same_bits(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(same_bits(a[i].second, b[i].second));
  }
}

// A file name of this test, removed by rank 0 before use (every rank waits for that).
std::string fresh_path(const std::string& name) {
  const auto world = ProcessGroup::world();
  if (world.rank() == 0) std::filesystem::remove(name);
  world.barrier();
  return name;
}

// A run with every kind of state: SyncBatchNorm statistics, Dropout's stream, SGD momentum, a one-cycle schedule,
// a shuffled and augmented loader, and a noise generator that differs per rank.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<optim::SGD> optimizer;
  std::unique_ptr<optim::OneCycleLR> schedule;
  std::unique_ptr<data::DataLoader> loader;
  Generator noise;
  std::unique_ptr<PeriodicCheckpointer> checkpointer;
};

constexpr int kEpochs = 2;

std::unique_ptr<Run> make_run(std::uint64_t init_seed, const std::string& path, std::int64_t every_steps) {
  const auto world = ProcessGroup::world();
  auto run = std::make_unique<Run>();
  Generator data_generator(11);
  const data::TensorDataset dataset(randn({192, 1, 6, 6}, data_generator), randint(0, 3, {192}, data_generator));
  auto sampler = std::make_shared<data::DistributedSampler>(192, world.world_size(), world.rank(), true, 5,
                                                            data::Remainder::Drop);
  run->loader = std::make_unique<data::DataLoader>(
      dataset, sampler,
      data::DataLoaderOptions{}.with_batch_size(16 / world.world_size()).with_drop_last().with_seed(5).with_augmentation(
          data::Augmentation{.crop_padding = 1, .horizontal_flip = true}));
  manual_seed(init_seed + static_cast<std::uint64_t>(world.rank()));
  run->model = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Conv2d(nn::Conv2dOptions{1, 3, 3}.with_padding(1)), nn::BatchNorm2d(3), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(27, 8), nn::ReLU(), nn::Dropout(0.3), nn::Linear(8, 3)});
  distributed::convert_sync_batchnorm(*run->model, world);
  run->ddp = std::make_unique<distributed::DistributedDataParallel>(run->model, world);
  run->optimizer = std::make_unique<optim::SGD>(run->model->parameters(),
                                                optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
  run->schedule = std::make_unique<optim::OneCycleLR>(
      *run->optimizer, 0.05, optim::OneCycleOptions{.total_steps = kEpochs * run->loader->size()});
  run->noise.manual_seed(77 + static_cast<std::uint64_t>(world.rank()));
  run->checkpointer = std::make_unique<PeriodicCheckpointer>(world, distributed::PeriodicCheckpointOptions{
                                                                        .path = path, .every_steps = every_steps});
  run->checkpointer->track(*run->model).track(*run->optimizer).track(*run->schedule).track("noise", run->noise);
  return run;
}

// Trains to the end of kEpochs, or stops after the global step `stop_after` (0: never) as a killed job would.
void train(Run& run, std::int64_t stop_after = 0) {
  run.model->train();
  auto& checkpointer = *run.checkpointer;
  for (; checkpointer.epoch() < kEpochs; checkpointer.epoch_done()) {
    for (auto& batch : checkpointer.remaining_batches(*run.loader)) {
      run.optimizer->zero_grad();
      const Tensor input = batch.images + randn(batch.images.shape(), run.noise) * 0.1;
      cross_entropy(run.ddp->forward(input), batch.labels).backward();
      run.ddp->synchronize_gradients();
      run.optimizer->step();
      run.schedule->step();
      checkpointer.step_done();
      if (checkpointer.step() == stop_after) return;
    }
  }
}

}  // namespace

TEST_CASE("docs/distributed.md quotes this test's periodic checkpoint example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/distributed/test_elastic.cpp", "docs/distributed.md");
}

TEST_CASE("the docs example, run again after it stopped, ends where one uninterrupted run ends") {
  Generator generator(3);
  const data::TensorDataset dataset(randn({640, 8}, generator), randint(0, 3, {640}, generator));
  auto make_model = [](std::uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(
        nn::Sequential{nn::Linear(8, 16), nn::ReLU(), nn::Dropout(0.2), nn::Linear(16, 3)});
  };
  auto straight = make_model(1);
  train(straight, dataset, 2, fresh_path("test_elastic_docs_straight.ckpt"));
  const std::string path = fresh_path("test_elastic_docs.ckpt");
  train(make_model(1), dataset, 1, path);  // "stops" after epoch 1 (saved at its last step: 20 or 40 steps)
  auto resumed = make_model(2);             // other initial weights: only the file carries the run on
  train(resumed, dataset, 2, path);
  require_same_bits(straight->state(), resumed->state());
}

TEST_CASE("a run stopped mid-epoch and resumed into fresh objects continues bit for bit") {
  const auto world = ProcessGroup::world();
  auto straight = make_run(1, fresh_path("test_elastic_straight.ckpt"), 0);
  train(*straight);
  REQUIRE(straight->checkpointer->step() == kEpochs * 12);
  // Stops after step 17 (epoch 1, 5 steps into it); the last save was at step 15, so steps 16 and 17 are redone.
  const std::string path = fresh_path("test_elastic_resumed.ckpt");
  {
    auto first = make_run(1, path, 5);
    train(*first, 17);
    CHECK(first->checkpointer->saves() == 3);
  }
  auto second = make_run(9, path, 5);  // other initial weights and noise streams
  REQUIRE(second->checkpointer->resume());
  CHECK(second->checkpointer->step() == 15);
  CHECK(second->checkpointer->epoch() == 1);
  CHECK(second->checkpointer->step_in_epoch() == 3);
  CHECK(second->checkpointer->resumed_world_size() == world.world_size());
  train(*second);
  CHECK(second->checkpointer->step() == kEpochs * 12);
  require_same_bits(straight->model->state(), second->model->state());
  require_same_bits(straight->optimizer->state(), second->optimizer->state());
  require_same_bits(straight->schedule->state(), second->schedule->state());
  CHECK(straight->noise.state() == second->noise.state());  // this rank's own stream, not rank 0's
}

TEST_CASE("every_seconds: rank 0's clock decides, and every rank saves at the same steps") {
  const auto world = ProcessGroup::world();
  double seconds = 0;  // rank 0's clock advances 1 s per step; the other ranks' clocks stand still
  PeriodicCheckpointer checkpointer(world, {.path = fresh_path("test_elastic_seconds.ckpt"),
                                            .every_seconds = 2.5,
                                            .clock = [&] { return world.rank() == 0 ? seconds : 0.0; }});
  std::vector<std::int64_t> saved_at;
  for (int step = 1; step <= 10; ++step) {
    seconds += 1;
    if (checkpointer.step_done()) saved_at.push_back(checkpointer.step());
  }
  CHECK(saved_at == std::vector<std::int64_t>{3, 6, 9});
  CHECK(checkpointer.saves() == 3);
  CHECK(load_checkpoint("test_elastic_seconds.ckpt").step == 9);
}

TEST_CASE("resume without a file returns false and changes nothing") {
  auto run = make_run(4, fresh_path("test_elastic_none.ckpt"), 5);
  const auto before = run->model->state();
  std::vector<Tensor> copies;
  for (const auto& entry : before) copies.push_back(entry.second.clone());
  CHECK_FALSE(run->checkpointer->resume());
  CHECK(run->checkpointer->step() == 0);
  CHECK(run->checkpointer->resumed_world_size() == 0);
  for (std::size_t i = 0; i < copies.size(); ++i) CHECK(same_bits(copies[i], before[i].second));
}

TEST_CASE("restore gives each rank its own generator; ranks the saving job did not have keep theirs") {
  const auto world = ProcessGroup::world();
  Generator mine(500 + static_cast<std::uint64_t>(world.rank()));
  PeriodicCheckpointer checkpointer(world, {.path = "unused.ckpt"});
  checkpointer.track("stream", mine);
  Checkpoint checkpoint = checkpointer.snapshot();  // every rank's state, gathered
  for (int r = 0; r < world.world_size(); ++r)
    CHECK(checkpoint.rng_states.at("stream@rank" + std::to_string(r)) == Generator(500 + r).state());
  mine.next_bits();
  checkpointer.restore(checkpoint);
  CHECK(mine.state() == Generator(500 + static_cast<std::uint64_t>(world.rank())).state());
  // Written by a 1-rank job: rank 0 gets rank 0's state, the others keep their own.
  Checkpoint one_rank = checkpoint;
  one_rank.metadata["periodic.world_size"] = "1";
  for (int r = 1; r < world.world_size(); ++r) one_rank.rng_states.erase("stream@rank" + std::to_string(r));
  mine.next_bits();
  const std::string advanced = mine.state();
  checkpointer.restore(one_rank);
  CHECK(checkpointer.resumed_world_size() == 1);
  CHECK(mine.state() == (world.rank() == 0 ? Generator(500).state() : advanced));
}

TEST_CASE("PeriodicCheckpointer's errors name what is wrong") {
  const auto world = ProcessGroup::world();
  CHECK_THROWS_WITH(PeriodicCheckpointer(world, {}), "PeriodicCheckpointer: options.path is empty");
  CHECK_THROWS_WITH(PeriodicCheckpointer(world, {.path = "x", .every_steps = -1}),
                    "PeriodicCheckpointer: every_steps must be >= 0, got -1");
  Generator generator;
  PeriodicCheckpointer checkpointer(world, {.path = "x"});
  checkpointer.track("g", generator);
  CHECK_THROWS_WITH(checkpointer.track("g", generator), "PeriodicCheckpointer::track: a generator named 'g' is tracked already");
  Checkpoint empty;
  CHECK_THROWS_WITH(checkpointer.restore(empty),
                    "PeriodicCheckpointer::restore: the checkpoint has no metadata 'periodic.step_in_epoch' (was it "
                    "written by PeriodicCheckpointer?)");
  empty.metadata = {{"periodic.step_in_epoch", "0"}, {"periodic.world_size", "2"}};
  CHECK_THROWS_WITH(checkpointer.restore(empty), "PeriodicCheckpointer::restore: the checkpoint has no generator 'g'");
  nn::Linear model(2, 2);
  checkpointer.track(model);
  CHECK_THROWS_WITH(checkpointer.restore(empty), "PeriodicCheckpointer::restore: a model is tracked but the checkpoint holds none");
}
