#pragma once
/// DistributedDataParallel: one model replica per rank, kept identical by averaging gradients across ranks.
#include <tapegrad/export.h>
#include <cstddef>
#include <memory>

#include <tapegrad/framework/distributed/process_group.h>
#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// How DistributedDataParallel communicates.
struct DataParallelOptions {
  /// Gradients are flattened into buckets of about this many bytes, one allreduce per bucket (PyTorch's 25 MB).
  std::size_t bucket_bytes = 25u << 20;
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
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> model, ProcessGroup group, DataParallelOptions options = {});

  /// The wrapped model's forward; in training with broadcast_buffers, first copies rank 0's buffers.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// Averages every parameter's gradient over ranks, bucket by bucket. A parameter without a gradient on some
  /// ranks counts as zero there; one without a gradient on every rank is left without one.
  void synchronize_gradients();
  /// Copies rank 0's parameters and buffers to every rank (done at construction).
  void broadcast_state();
  /// Copies rank 0's buffers to every rank.
  void broadcast_buffers();

  nn::Module& model() { return *model_; }
  const std::shared_ptr<nn::Module>& model_pointer() const { return model_; }
  const ProcessGroup& group() const { return group_; }
  /// Number of allreduce calls the last synchronize_gradients() made for gradient buckets.
  std::size_t last_bucket_count() const { return last_bucket_count_; }

 private:
  std::shared_ptr<nn::Module> model_;
  ProcessGroup group_;
  DataParallelOptions options_;
  std::size_t last_bucket_count_ = 0;
};

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
