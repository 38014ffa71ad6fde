#pragma once
/// Surviving a killed rank: periodic checkpoints of a whole data-parallel run (written by rank 0) and resuming
/// from them on every rank, so that a job restarted by a launcher (tools/tapegrad_run) continues where it was.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <tapegrad/framework/data/data_loader.h>
#include <tapegrad/framework/distributed/process_group.h>
#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/module.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/optim/lr_scheduler.h>
#include <tapegrad/optim/optimizer.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// When and where PeriodicCheckpointer writes.
struct PeriodicCheckpointOptions {
  /// The checkpoint file; rank 0 writes it (atomically: a temporary file renamed over it) and reads it.
  std::string path;
  /// Save after every this-many steps (0: not by steps).
  std::int64_t every_steps = 0;
  /// Save after the first step that ends this many seconds after the last save or the start (0: not by time).
  /// Rank 0's clock decides, and its decision is broadcast after every step (one 8-byte broadcast).
  double every_seconds = 0;
  /// Seconds on a monotonic clock; empty means std::chrono::steady_clock (tests pass their own).
  std::function<double()> clock = {};
};

/// Where a data-parallel run stands. `step_in_epoch` counts the steps done in `epoch`, so a resumed run skips
/// exactly that many batches of that epoch; steps are global (every rank takes each one together).
struct TrainingPosition {
  std::int64_t epoch = 0;
  std::int64_t step_in_epoch = 0;
  std::int64_t step = 0;  ///< steps since the start of training, over all epochs
};

/// Note: the run's state is the model (parameters and persistent buffers: BatchNorm's statistics, Dropout's
/// streams), the optimizer, the scheduler, the position and the generators registered with track(). Data-parallel
/// replicas are identical after every step (DistributedDataParallel, SyncBatchNorm, or broadcast_buffers), so the
/// model, optimizer and scheduler are rank 0's; a generator may differ per rank, so every rank's state is gathered
/// and saved, and each rank gets its own back. Shuffling and augmentation need no state: a DataLoader derives
/// both from (seed, epoch), and remaining_batches() replays the batches of the epoch already done (loading
/// them, which is cheap next to a training step) so the augmentation stream is where it was.
/// Every member that may save or load is a collective: call it on every rank, at the same step.
/// Resuming on another number of ranks continues the run (the sampler re-shards the same global order, so each
/// global batch holds the same samples when the global batch size is kept), but not bit for bit: the sums
/// over ranks change order, and a rank without a saved generator keeps its own seeding.
class PeriodicCheckpointer {
 public:
  PeriodicCheckpointer(ProcessGroup group, PeriodicCheckpointOptions options);

  /// What a checkpoint holds; the objects must outlive the checkpointer. At most one model, optimizer and
  /// scheduler; generators by unique name (the same names on every rank).
  PeriodicCheckpointer& track(nn::Module& model);
  PeriodicCheckpointer& track(optim::Optimizer& optimizer);
  PeriodicCheckpointer& track(optim::LRScheduler& scheduler);
  PeriodicCheckpointer& track(const std::string& name, Generator& generator);

  /// Loads the checkpoint into every tracked object on every rank when rank 0 finds the file (rank 0 reads it
  /// and broadcasts its bytes, so other ranks need no shared file system); returns whether it did. Call once,
  /// before training.
  bool resume();
  /// Counts one finished training step (after the optimizer's step) and saves when one of the intervals is
  /// due; returns whether it saved.
  bool step_done();
  /// Ends the epoch: the position moves to the next epoch's first step.
  void epoch_done();
  /// Saves now, to the options' path or to `path`.
  void save();
  void save(const std::string& path);

  /// The batches of `loader` that epoch() has left: sets the loader to epoch() and skips the step_in_epoch()
  /// batches already trained. A range for a range-based for.
  struct Batches {
    data::DataLoader::Iterator first;
    data::DataLoader::Sentinel last;
    data::DataLoader::Iterator begin() const { return first; }
    data::DataLoader::Sentinel end() const { return last; }
  };
  Batches remaining_batches(data::DataLoader& loader) const;

  const TrainingPosition& position() const { return position_; }
  std::int64_t epoch() const { return position_.epoch; }
  std::int64_t step_in_epoch() const { return position_.step_in_epoch; }
  std::int64_t step() const { return position_.step; }
  /// After resume(): the number of ranks that wrote the checkpoint (0 when nothing was resumed).
  int resumed_world_size() const { return resumed_world_size_; }
  /// Number of checkpoints this process's checkpointer has written (rank 0) or taken part in (other ranks).
  std::int64_t saves() const { return saves_; }
  /// Seconds spent in the last save (gathering the generators and, on rank 0, writing the file).
  double last_save_seconds() const { return last_save_seconds_; }

  /// The checkpoint of the current state as rank 0 would write it (a collective: it gathers the generators).
  Checkpoint snapshot() const;
  /// Restores a checkpoint written by snapshot() (on every rank; no communication).
  void restore(const Checkpoint& checkpoint);

 private:
  double now() const;
  bool due();

  ProcessGroup group_;
  ProcessGroup quiet_group_;  // the same ranks without the per-collective shape check, for the per-step flag
  PeriodicCheckpointOptions options_;
  nn::Module* model_ = nullptr;
  optim::Optimizer* optimizer_ = nullptr;
  optim::LRScheduler* scheduler_ = nullptr;
  std::vector<std::pair<std::string, Generator*>> generators_;
  TrainingPosition position_;
  std::int64_t last_save_step_ = 0;
  double last_save_time_ = 0;
  int resumed_world_size_ = 0;
  std::int64_t saves_ = 0;
  double last_save_seconds_ = 0;
};

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
