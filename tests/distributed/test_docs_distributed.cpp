// docs/distributed.md's example, compiled and run on 2 ranks: the code between the DOC markers is exactly the
// page's snippet, and the model it trains ends identical on every rank.
#include <catch2/catch.hpp>

#include "support/doc_snippet.h"

// DOC-BEGIN
#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/data/distributed_sampler.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/framework/serialize/checkpoint.h>
using namespace tapegrad;

// One epoch of data-parallel training: run the same program on every rank (mpirun -np 2 ./train).
std::shared_ptr<nn::Sequential> train(const data::TensorDataset& dataset, const std::string& path) {
  const auto world = distributed::ProcessGroup::world();
  auto model = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Linear(8, 16), nn::BatchNorm1d(16), nn::ReLU(),
      nn::Linear(16, 3)});
  distributed::convert_sync_batchnorm(*model, world);     // before the optimizer sees the parameters
  distributed::DistributedDataParallel ddp(model, world);  // every rank now holds rank 0's weights and buffers
  optim::SGD optimizer(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  // Each rank visits its own 1/world of the same shuffled order; the global batch is 16 * world.
  auto sampler = std::make_shared<data::DistributedSampler>(dataset.size(), world.world_size(), world.rank());
  data::DataLoader loader(dataset, sampler, data::DataLoaderOptions{}.with_batch_size(16));
  for (auto& batch : loader) {
    optimizer.zero_grad();
    const Tensor loss = cross_entropy(ddp.forward(batch.images), batch.labels);
    loss.backward();
    ddp.synchronize_gradients();  // each gradient is now the mean over ranks
    optimizer.step();             // the same step on every rank
  }
  if (world.rank() == 0) save(*model, path);  // checkpoint from rank 0 only; every rank can load it
  world.barrier();
  return model;
}
// DOC-END

TEST_CASE("docs/distributed.md quotes this test's example") {
  tapegrad::testing::check_doc_quotes_snippet("tests/distributed/test_docs_distributed.cpp", "docs/distributed.md");
}

TEST_CASE("the docs example trains the same model on every rank, and rank 0's file loads on every rank") {
  const auto world = distributed::ProcessGroup::world();
  Generator generator(3);
  const Tensor images = randn({160, 8}, generator);
  const data::TensorDataset dataset(images, randint(0, 3, {160}, generator));
  const std::string path = "test_docs_distributed.tgm";
  auto model = train(dataset, path);
  auto reloaded = std::dynamic_pointer_cast<nn::Sequential>(model->clone());
  load(*reloaded, path);
  for (const auto& [name, tensor] : model->state()) {
    INFO(name);
    const auto all = world.allgather(tensor);
    for (const Tensor& other : all) CHECK(other.to_vector() == all[0].to_vector());
  }
  const auto a = model->state(), b = reloaded->state();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].second.to_vector() == b[i].second.to_vector());
  CHECK(model->at_as<distributed::SyncBatchNorm>(1)->num_batches_tracked.item() == 160 / (16 * world.world_size()));
}
