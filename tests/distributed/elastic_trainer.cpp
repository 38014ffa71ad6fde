// The program tests/distributed/elastic_restart.sh trains under tools/tapegrad_run: a tiny SyncBatchNorm CNN on
// synthetic 8x8 images whose run has every kind of state (parameters, BatchNorm statistics, Dropout's stream,
// SGD momentum, a one-cycle schedule, shuffling, augmentation, and a noise generator that differs per rank),
// with periodic checkpoints through distributed::PeriodicCheckpointer. --kill-rank R --kill-step S make rank R
// SIGKILL itself during step S (after its backward, before the gradient allreduce, so the other ranks wait in a
// collective) in the job's first attempt only (TAPEGRAD_RESTART_COUNT unset or 0). It prints wall-clock times
// (Unix milliseconds) for the script to measure the time lost, writes the final state with every rank's
// generators to --final, and appends to batches.txt a digest of the samples of each global batch (rank 0), which
// shows that a restart on fewer ranks trains on the same global batches.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>
#include <tapegrad/framework/data/distributed_sampler.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/elastic.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>

using namespace tapegrad;

namespace {

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "--name value" pairs; every option has a default.
std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> options{{"--epochs", "3"},      {"--every-steps", "5"}, {"--every-seconds", "0"},
                                             {"--kill-rank", "-1"},   {"--kill-step", "0"},   {"--checkpoint", "run.ckpt"},
                                             {"--final", "final.ckpt"}, {"--compare", ""},     {"--seed", "0"}};
  for (int i = 1; i < argc; i += 2) {
    if (options.find(argv[i]) == options.end() || i + 1 >= argc)
      fail("elastic_trainer: unknown option or missing value: {}", argv[i]);
    options[argv[i]] = argv[i + 1];
  }
  return options;
}

// |a - b| / |b| over the parameters of two checkpoints (2-norms over all of them), or -1 when their names or
// shapes differ.
double relative_difference(const Checkpoint& a, const Checkpoint& b) {
  if (a.model.size() != b.model.size()) return -1;
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < a.model.size(); ++i) {
    if (a.model[i].name != b.model[i].name || a.model[i].value.shape() != b.model[i].value.shape()) return -1;
    if (a.model[i].kind != EntryKind::Parameter) continue;
    const auto x = a.model[i].value.to(DType::Float64).to_vector(), y = b.model[i].value.to(DType::Float64).to_vector();
    for (std::size_t j = 0; j < x.size(); ++j) {
      difference += (x[j] - y[j]) * (x[j] - y[j]);
      norm += y[j] * y[j];
    }
  }
  return std::sqrt(difference / norm);
}

}  // namespace

int main(int argc, char** argv) {
  return distributed::run_or_abort([&] {
    const auto world = distributed::ProcessGroup::world();
    const bool leader = world.rank() == 0;
    const auto options = parse(argc, argv);
    const char* restart_count = std::getenv("TAPEGRAD_RESTART_COUNT");
    const int attempt = restart_count == nullptr ? 0 : std::atoi(restart_count);
    const std::uint64_t seed = std::stoull(options.at("--seed"));
    const int kill_rank = std::stoi(options.at("--kill-rank"));
    const std::int64_t kill_step = std::stoll(options.at("--kill-step"));
    if (leader) std::printf("elastic_trainer: attempt %d, %d ranks, start at %lld\n", attempt, world.world_size(), unix_ms());
    set_num_threads(1);

    // 384 images of 1x8x8 in 4 classes; a global batch of 32 (12 steps per epoch on any number of ranks dividing 32).
    // Note: the dataset's labels are the samples' indices (for the batch digests); the classes come from a table.
    Generator data_generator(7);
    const Tensor images = randn({384, 1, 8, 8}, data_generator);
    std::vector<std::int64_t> classes(384);
    for (auto& c : classes) c = static_cast<std::int64_t>(data_generator.below(4));
    const data::TensorDataset dataset(images, arange(384));
    const std::int64_t global_batch = 32;
    if (global_batch % world.world_size() != 0) fail("elastic_trainer: {} ranks do not divide 32", world.world_size());
    auto sampler = std::make_shared<data::DistributedSampler>(dataset.size(), world.world_size(), world.rank(),
                                                              /*shuffle=*/true, seed, data::Remainder::Drop);
    data::DataLoader loader(dataset, sampler,
                            data::DataLoaderOptions{}
                                .with_batch_size(global_batch / world.world_size())
                                .with_drop_last()
                                .with_seed(seed)
                                .with_augmentation(data::Augmentation{.crop_padding = 1, .horizontal_flip = true}));

    // Built from another seed on each rank: DistributedDataParallel makes rank 0's weights everyone's, and a resumed
    // run gets them from the checkpoint.
    manual_seed(seed + 100 + static_cast<std::uint64_t>(world.rank()));
    auto model = std::make_shared<nn::Sequential>(nn::Sequential{
        nn::Conv2d(nn::Conv2dOptions{1, 4, 3}.with_padding(1)), nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2),
        nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Dropout(0.25), nn::Linear(16, 4)});
    distributed::convert_sync_batchnorm(*model, world);
    distributed::DistributedDataParallel ddp(model, world);
    const int epochs = std::stoi(options.at("--epochs"));
    optim::SGD optimizer(model->parameters(),
                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    optim::OneCycleLR schedule(optimizer, 0.05, optim::OneCycleOptions{.total_steps = epochs * loader.size()});
    // Input noise from a stream of this rank's own: the state that differs between ranks.
    Generator noise(1000 + static_cast<std::uint64_t>(world.rank()));

    distributed::PeriodicCheckpointer checkpointer(
        world, {.path = options.at("--checkpoint"),
                .every_steps = std::stoll(options.at("--every-steps")),
                .every_seconds = std::stod(options.at("--every-seconds"))});
    checkpointer.track(*model).track(optimizer).track(schedule).track("noise", noise);
    if (checkpointer.resume()) {
      if (leader)
        std::printf("elastic_trainer: resumed at step %lld (epoch %lld, step %lld of it), written by %d ranks, at %lld\n",
                    static_cast<long long>(checkpointer.step()), static_cast<long long>(checkpointer.epoch()),
                    static_cast<long long>(checkpointer.step_in_epoch()), checkpointer.resumed_world_size(), unix_ms());
    } else if (leader) {
      std::printf("elastic_trainer: no checkpoint, step 0 at %lld\n", unix_ms());
    }
    std::fflush(stdout);

    std::FILE* batch_log = leader ? std::fopen("batches.txt", "a") : nullptr;
    if (leader && batch_log == nullptr) fail("elastic_trainer: cannot open batches.txt");
    model->train();
    for (; checkpointer.epoch() < epochs; checkpointer.epoch_done()) {
      for (auto& batch : checkpointer.remaining_batches(loader)) {
        optimizer.zero_grad();
        const Tensor input = batch.images + randn(batch.images.shape(), noise) * 0.05;
        std::vector<std::int64_t> targets;
        std::int64_t digest[2] = {0, 0};
        for (double id : batch.labels.to_vector()) {
          const auto i = static_cast<std::int64_t>(id);
          targets.push_back(classes[static_cast<std::size_t>(i)]);
          digest[0] += i * 2654435761 % 1000003;
          digest[1] += i * 40503 % 999983;
        }
        const Tensor loss = cross_entropy(ddp.forward(input), from_vector(targets, {batch.labels.numel()}));
        loss.backward();
        if (attempt == 0 && world.rank() == kill_rank && checkpointer.step() + 1 == kill_step) {
          std::printf("elastic_trainer: rank %d SIGKILLs itself in step %lld at %lld\n", world.rank(),
                      static_cast<long long>(kill_step), unix_ms());
          std::fflush(stdout);
          raise(SIGKILL);
        }
        ddp.synchronize_gradients();
        optimizer.step();
        schedule.step();
        if (!std::isfinite(loss.item())) fail("elastic_trainer: loss {} at step {}", loss.item(), checkpointer.step() + 1);
        Tensor digests = from_vector(std::vector<std::int64_t>{digest[0], digest[1]}, {2});
        world.allreduce(digests);
        if (leader) {
          const auto sums = digests.to_vector();
          std::fprintf(batch_log, "step %lld digest %.0f %.0f\n", static_cast<long long>(checkpointer.step() + 1), sums[0],
                       sums[1]);
          std::fflush(batch_log);
        }
        if (checkpointer.step_done() && leader) {
          std::printf("elastic_trainer: checkpoint at step %lld at %lld (%.1f ms)\n",
                      static_cast<long long>(checkpointer.step()), unix_ms(), checkpointer.last_save_seconds() * 1e3);
          std::fflush(stdout);
        }
      }
    }
    if (batch_log != nullptr) std::fclose(batch_log);
    checkpointer.save(options.at("--final"));
    if (leader) {
      std::printf("elastic_trainer: done, %lld steps, wrote %s at %lld\n", static_cast<long long>(checkpointer.step()),
                  options.at("--final").c_str(), unix_ms());
      if (!options.at("--compare").empty()) {
        const double difference = relative_difference(load_checkpoint(options.at("--final")),
                                                      load_checkpoint(options.at("--compare")));
        std::printf("elastic_trainer: parameters' relative difference from %s: %.3g\n", options.at("--compare").c_str(),
                    difference);
      }
    }
  });
}
