#pragma once
/// DistributedDataParallel: one model replica per rank, kept identical by averaging gradients across ranks.
#include <tapegrad/export.h>
#include <cstddef>
#include <memory>
#include <vector>

#include <tapegrad/framework/distributed/process_group.h>
#include <tapegrad/framework/distributed/reducer.h>
#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// How DistributedDataParallel communicates.
struct DataParallelOptions {
  /// Gradients are flattened into buckets of at least this many bytes (PyTorch's bucket_cap_mb: 25 MiB), one
  /// allreduce per bucket; a bucket closes at the parameter that takes it to the limit.
  std::size_t bucket_bytes = 25u << 20;
  /// The limit of the bucket of the parameters registered first, reduced last (PyTorch's 1 MiB first bucket,
  /// capped by bucket_bytes): a small one leaves a short tail of communication after backward.
  std::size_t first_bucket_bytes = 1u << 20;
  /// Allreduce each bucket during backward as soon as its gradients are final, waiting at the end of backward
  /// (PyTorch's DDP always does); off: synchronize_gradients() reduces everything after backward. The averaged
  /// gradients are bit for bit the same either way. The environment variable TAPEGRAD_DDP_OVERLAP=0 or 1
  /// overrides it (and TAPEGRAD_DDP_BUCKET_BYTES, TAPEGRAD_DDP_FIRST_BUCKET_BYTES the sizes), for A/B runs.
  bool overlap_communication = true;
  /// Copy rank 0's buffers to every rank before each training forward (PyTorch's broadcast_buffers), so a
  /// plain BatchNorm's running statistics stay identical; SyncBatchNorm does not need it.
  bool broadcast_buffers = false;
};

/// Note: the wrapper holds the model; it is not a Module itself, so the model's state names (and checkpoints)
/// are the same as without it. Construction copies rank 0's parameters and buffers to every rank. A step is:
/// forward (through the wrapper), loss over this rank's share of the batch, backward, synchronize_gradients()
/// (each gradient becomes the mean over ranks, which is the gradient of the mean loss when every rank holds
/// the same number of samples), then the optimizer's step, identical on every rank. Build the optimizer from
/// model().parameters() as usual, after convert_sync_batchnorm() when that is used.
/// Note: with overlap_communication, a training forward with grad mode on arms the reducer for the calling
/// thread's next backward, which then averages the gradients (synchronize_gradients() only checks that nothing
/// changed them since); gradient buckets travel on a communicator of their own (ProcessGroup::duplicate), so
/// they never meet the model's own collectives (SyncBatchNorm's) out of order.
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> model, ProcessGroup group, DataParallelOptions options = {});
  /// With TAPEGRAD_DDP_PROFILE=1 in the environment, prints the reducer's statistics() to stderr.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The wrapped model's forward; in training with broadcast_buffers, first copies rank 0's buffers. In
  /// training with grad mode on and overlap_communication (and outside no_sync()), arms the reducer.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// Averages every parameter's gradient over ranks, bucket by bucket (or returns at once when backward already
  /// did). A parameter without a gradient on some ranks counts as zero there; one without a gradient on every
  /// rank is left without one.
  void synchronize_gradients();

  /// While the returned guard lives, forward does not arm the reducer (PyTorch's no_sync): backward passes then
  /// accumulate local gradients, for gradient accumulation; the pass after it (or synchronize_gradients())
  /// averages the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_enabled_) { ddp.sync_enabled_ = false; }
    ~NoSyncGuard() { ddp_.sync_enabled_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  /// Copies rank 0's parameters and buffers to every rank (done at construction).
  void broadcast_state();
  /// Copies rank 0's buffers to every rank.
  void broadcast_buffers();

  nn::Module& model() { return *model_; }
  const std::shared_ptr<nn::Module>& model_pointer() const { return model_; }
  const ProcessGroup& group() const { return group_; }
  /// Number of bucket allreduces the last gradient averaging made.
  std::size_t last_bucket_count() const { return reducer_->last_bucket_count(); }
  /// The options in force (after the environment overrides).
  const DataParallelOptions& options() const { return options_; }
  /// The gradient reducer: bucket sizes, and what communication cost (statistics()).
  const Reducer& reducer() const { return *reducer_; }
  Reducer& reducer() { return *reducer_; }

 private:
  std::vector<Tensor> trainable_parameters() const;

  std::shared_ptr<nn::Module> model_;
  ProcessGroup group_;
  DataParallelOptions options_;
  std::shared_ptr<Reducer> reducer_;
  bool sync_enabled_ = true;
};

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
