// Fashion-MNIST CNN trained data-parallel over MPI: the fashion_mnist_cnn model and recipe, each rank holding
// 1/world of every global batch (DistributedSampler), gradients averaged by DistributedDataParallel, BatchNorm
// converted to SyncBatchNorm (or --plain-bn: plain BatchNorm with rank 0's buffers broadcast each step).
// Rank 0 evaluates and saves a checkpoint that `fashion_mnist_cnn --evaluate` loads into a plain model.
// With --checkpoint-every N (steps) or --checkpoint-seconds S, rank 0 also saves the whole run periodically and
// a new start resumes from that file, so tools/tapegrad_run can restart a job whose rank died.
//   mpirun -np 2 --oversubscribe ./fashion_mnist_ddp --epochs 4
//   tools/tapegrad_run --nproc 2 --max-restarts 3 -- ./fashion_mnist_ddp --checkpoint-every 100
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <thread>

#include <tapegrad/framework/data/distributed_sampler.h>
#include <tapegrad/framework/distributed/data_parallel.h>
#include <tapegrad/framework/distributed/elastic.h>
#include <tapegrad/framework/distributed/sync_batch_norm.h>

#include "common/training.h"

using namespace tapegrad;

namespace {

// The number of cores this process may run on (its CPU affinity mask, which mpirun's binding narrows).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, CPU_COUNT(&set));
}

// CPU seconds of this process (all its threads).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  return distributed::run_or_abort([&] {
    const auto world = distributed::ProcessGroup::world();
    const bool leader = world.rank() == 0;
    examples::Options options;
    options.epochs = 4;
    options.batch_size = 128;
    options.lr = 0.1;
    bool plain_batch_norm = false;
    distributed::PeriodicCheckpointOptions periodic;
    CLI::App app{"Train the BatchNorm CNN on Fashion-MNIST on every rank of an MPI job"};
    examples::add_options(app, options);
    app.add_flag("--plain-bn", plain_batch_norm, "keep plain BatchNorm (buffers broadcast from rank 0) instead of SyncBatchNorm");
    app.add_option("--checkpoint-every", periodic.every_steps,
                   "save the whole run every N steps (rank 0) and resume from it at start; 0: never");
    app.add_option("--checkpoint-seconds", periodic.every_seconds,
                   "save the whole run every S seconds (rank 0) and resume from it at start; 0: never");
    app.add_option("--periodic-checkpoint", periodic.path,
                   "the periodic checkpoint (default: <output-dir>/fashion_mnist_ddp.periodic.ckpt)");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& error) {
      std::exit(leader ? app.exit(error) : 0);
    }
    // Note: ranks share the machine's cores; by default each takes its share instead of all of them. mpirun
    // binds each rank to one core unless told otherwise (Open MPI's default for 2 or fewer ranks), and more
    // threads than the cores a rank may run on would make its OpenMP team take turns on one core (measured:
    // 3x slower), so the share is capped by this process's CPU affinity, and an explicit excess is reported.
    const int allowed_cores = usable_cores();
    const int share = static_cast<int>(std::thread::hardware_concurrency()) / world.world_size();
    if (options.threads == 0)
      options.threads = std::max(1, std::min(allowed_cores, share));
    else if (options.threads > allowed_cores)
      fmt::print(stderr,
                 "fashion_mnist_ddp: rank {} may run on {} core(s) only, so --threads {} will oversubscribe them; "
                 "launch with `mpirun --bind-to none` (one host, ranks x threads <= cores) or `--map-by slot:PE={}`\n",
                 world.rank(), allowed_cores, options.threads, options.threads);
    examples::apply(options, "fashion_mnist_ddp");
    if (periodic.path.empty()) periodic.path = options.output_dir + "/fashion_mnist_ddp.periodic.ckpt";
    const bool periodic_saves = periodic.every_steps > 0 || periodic.every_seconds > 0;
    if (options.batch_size % world.world_size() != 0)
      fail("fashion_mnist_ddp: --batch-size {} is not a multiple of the {} ranks", options.batch_size, world.world_size());
    const std::int64_t per_rank_batch = options.batch_size / world.world_size();

    data::FashionMnistOptions data_options;
    data_options.dir = options.data_dir;
    const data::FashionMNIST full_train(data::Split::Train, data_options);
    const data::TensorDataset train_set = examples::take(full_train, options.subset);
    auto sampler = std::make_shared<data::DistributedSampler>(train_set.size(), world.world_size(), world.rank(),
                                                              /*shuffle=*/true, options.seed, data::Remainder::Drop);
    data::DataLoader loader(train_set, sampler,
                            data::DataLoaderOptions{}.with_batch_size(per_rank_batch).with_drop_last().with_seed(options.seed));
    const std::int64_t steps_per_epoch = options.max_steps > 0 ? std::min(options.max_steps, loader.size()) : loader.size();

    auto model = examples::make_cnn();
    if (!plain_batch_norm) distributed::convert_sync_batchnorm(*model, world);
    distributed::DataParallelOptions ddp_options;
    ddp_options.broadcast_buffers = plain_batch_norm;
    distributed::DistributedDataParallel ddp(model, world, ddp_options);
    examples::Training training = examples::make_sgd_one_cycle(*model, options.lr, steps_per_epoch * options.epochs);
    if (leader)
      fmt::print("{} ranks x {} threads, {} images per rank per step ({} global), {} steps per epoch, {}\n",
                 world.world_size(), get_num_threads(), per_rank_batch, options.batch_size, steps_per_epoch,
                 plain_batch_norm ? "plain BatchNorm + broadcast_buffers" : "SyncBatchNorm");

    // Note: the run's position, optimizer, schedule and model go into the periodic checkpoint; shuffling and
    // augmentation follow from (seed, epoch), and Dropout's streams are buffers of the model.
    distributed::PeriodicCheckpointer checkpointer(world, periodic);
    checkpointer.track(*model).track(*training.optimizer).track("default", default_generator());
    if (training.schedule) checkpointer.track(*training.schedule);
    if (periodic_saves && checkpointer.resume() && leader) {
      fmt::print("resumed {} at epoch {}, step {} of it ({} steps done), written by {} rank(s)\n", periodic.path,
                 checkpointer.epoch() + 1, checkpointer.step_in_epoch(), checkpointer.step(),
                 checkpointer.resumed_world_size());
      if (checkpointer.resumed_world_size() != world.world_size())
        fmt::print("note: {} ranks continue a {}-rank run: each global batch holds the same images, but the sums over "
                   "ranks change order, so the run is close to, not bit-identical with, an uninterrupted one\n",
                   world.world_size(), checkpointer.resumed_world_size());
    }

    const data::FashionMNIST test_set(data::Split::Test, data_options);
    examples::Score score;
    bool evaluated = false, last_step_saved = false;
    std::int64_t steps_trained = 0;  // by this start
    for (; checkpointer.epoch() < options.epochs; checkpointer.epoch_done()) {
      const std::int64_t epoch = checkpointer.epoch() + 1;
      model->train();
      world.barrier();
      const double start = examples::now_seconds();
      const double cpu_start = process_cpu_seconds();
      double loss_sum = 0;
      std::int64_t steps = 0;
      for (auto& batch : checkpointer.remaining_batches(loader)) {
        if (checkpointer.step_in_epoch() == steps_per_epoch) break;
        training.optimizer->zero_grad();
        const Tensor loss = cross_entropy(ddp.forward(batch.images), batch.labels);
        loss.backward();
        ddp.synchronize_gradients();
        training.optimizer->step();
        if (training.schedule) training.schedule->step();
        loss_sum += loss.item();
        ++steps;
        last_step_saved = checkpointer.step_done();
        if (last_step_saved && leader)
          fmt::print("saved {} at step {} ({:.0f} ms)\n", periodic.path, checkpointer.step(),
                     checkpointer.last_save_seconds() * 1e3);
      }
      // An epoch resumed at its end trains no step here (its mean loss is then NaN).
      Tensor mean_loss = scalar_tensor(loss_sum / static_cast<double>(steps), DType::Float64);
      // Note: each rank's CPU time per step, beside the wall-clock throughput: on a machine shared with other
      // processes the wall clock measures the scheduler, the CPU time what the step costs (it includes what a
      // rank spends polling in MPI while it waits).
      Tensor cpu_ms = zeros({world.world_size()}, TensorOptions{}.with_dtype(DType::Float64));
      cpu_ms.data<double>()[world.rank()] =
          1e3 * (process_cpu_seconds() - cpu_start) / static_cast<double>(std::max<std::int64_t>(steps, 1));
      world.allreduce(mean_loss, distributed::ReduceOp::Mean);
      world.allreduce(cpu_ms);
      world.barrier();
      const double seconds = examples::now_seconds() - start;
      steps_trained += steps;
      if (leader) {
        score = examples::evaluate(*model, test_set);
        evaluated = true;
        std::string cpu_per_rank;
        for (int r = 0; r < world.world_size(); ++r)
          cpu_per_rank += fmt::format("{}{:.2f}", r ? "/" : "", cpu_ms.data<double>()[r]);
        fmt::print("epoch {}/{}: loss {:.4f}  test loss {:.4f}  test acc {:.4f}  {:.1f}s  {:.0f} samples/s  CPU ms/step "
                   "per rank {}\n",
                   epoch, options.epochs, mean_loss.item(), score.loss, score.accuracy, seconds,
                   static_cast<double>(steps * options.batch_size) / seconds, cpu_per_rank);
        std::fflush(stdout);
      }
    }
    // Note: the run's last state goes into the periodic file too, so that starting the same command again finds
    // the run complete instead of repeating the steps after the last periodic save.
    if (periodic_saves && steps_trained > 0 && !last_step_saved) checkpointer.save();
    if (leader && !evaluated) {
      fmt::print("{} holds a complete run ({} steps): nothing left to train (delete it to train again)\n", periodic.path,
                 checkpointer.step());
      score = examples::evaluate(*model, test_set);
    }
    // Note: checkpoint from rank 0 only (every rank holds the same model); the state names are BatchNorm's, so
    // the single-process example loads it.
    if (leader) {
      Checkpoint saved = examples::make_checkpoint(*model, *training.optimizer, training.schedule.get(), loader,
                                                   options.epochs, steps_per_epoch * options.epochs);
      saved.metadata["example"] = "fashion_mnist_ddp";
      saved.metadata["test_accuracy"] = fmt::format("{:.6f}", score.accuracy);
      save_checkpoint(saved, options.checkpoint);
      fmt::print("saved {} (test accuracy {:.4f})\n", options.checkpoint, score.accuracy);
    }
    world.barrier();
  });
}
