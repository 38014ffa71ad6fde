// Builds against the installed tapegrad::distributed: a data-parallel step with SyncBatchNorm. Every rank draws
// the same input (same default seed), so averaging the gradients over any number of ranks must not change them.
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <memory>

int main() {
  using namespace tapegrad;
  return distributed::run_or_abort([] {
    auto group = distributed::ProcessGroup::world();
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(4, 3));
    model->push_back(std::make_shared<nn::BatchNorm1d>(3));
    int converted = distributed::convert_sync_batchnorm(*model, group);
    distributed::DistributedDataParallel ddp(model, group);

    Tensor input = randn({8, 4});
    Tensor loss = sum(ddp(input) * ddp(input));
    loss.backward();
    std::vector<std::vector<double>> local;
    for (const Tensor& parameter : model->parameters()) local.push_back(parameter.grad().to_vector());
    ddp.synchronize_gradients();
    std::size_t index = 0;
    for (const Tensor& parameter : model->parameters()) {
      std::vector<double> averaged = parameter.grad().to_vector();
      for (std::size_t i = 0; i < averaged.size(); ++i)
        if (std::abs(averaged[i] - local[index][i]) > 0) throw Error("consumer_distributed: gradient changed");
      ++index;
    }
    std::printf("consumer_distributed: OK (rank %d of %d, %d SyncBatchNorm, %zu buckets)\n", group.rank(),
                group.world_size(), converted, ddp.last_bucket_count());
  });
}
