#pragma once
/// SyncBatchNorm: BatchNorm whose training statistics are those of the global batch over every rank.
#include <tapegrad/export.h>
#include <memory>

#include <tapegrad/framework/distributed/process_group.h>
#include <tapegrad/layers/batch_norm.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// A training forward's output and the global per-channel statistics it normalized with.
struct SyncBatchNormResult {
  /// (x - mean) / sqrt(var + eps) * weight + bias with the global statistics, same shape as the input.
  Tensor output;
  /// Global per-channel mean, biased and unbiased variance, [C] (plain tensors, never requiring grad).
  Tensor mean, var, unbiased_var;
  /// Values per channel over every rank (sum over ranks of N * spatial size).
  std::int64_t global_count = 0;
};

/// Training-mode BatchNorm over [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] with statistics over every
/// rank's input (ranks may hold different N). Differentiable in input, weight and bias (first order; the backward
/// makes one allreduce of two per-channel sums). Every rank must call it, with the same C and dtype: a dtype that differs is
/// an error on every rank, and so is a C that differs while the group's check_shapes() is on (the default;
/// without it, a differing C is an MPI error). One collective per direction plus, with the check, one each.
SyncBatchNormResult sync_batch_norm_train(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps,
                                          const ProcessGroup& group);

/// Note: the same parameters, buffers, names, state version and freezing as BatchNorm1d/2d (it is a
/// BatchNormBase), so a BatchNorm's state loads into it and back. In training (or without running statistics)
/// it normalizes with the global batch statistics: the per-rank count, mean and sum of squared deviations are
/// gathered in one call and merged in rank order (Chan's parallel variance, numerically safe), and the running
/// variance is updated with the global unbiased variance, M2 / (global count - 1), which is right when ranks
/// hold different batch sizes. In eval it is a plain BatchNorm with the running statistics, no communication.
/// The first training step checks through the group that every rank's layer has the same C; later steps skip
/// that check's extra collectives (C is the layer's num_features, fixed), so a step makes one collective per
/// layer in forward and one in backward.
class SyncBatchNorm : public nn::BatchNormBase {
 public:
  SyncBatchNorm(const nn::BatchNormOptions& options, ProcessGroup group);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Module> clone() const override;
  const ProcessGroup& group() const { return group_; }

 protected:
  /// 2-D, 3-D or 4-D input, as BatchNorm1d and BatchNorm2d together.
  void check_rank(const Tensor& input) const override;

 private:
  ProcessGroup group_;
  // group_ without the per-collective shape check, used once a training step has checked the layouts.
  ProcessGroup unchecked_group_;
  bool layouts_checked_ = false;
};

/// Replaces every BatchNorm1d/BatchNorm2d below `model` by a SyncBatchNorm with the same options, state
/// (parameters, buffers) and mode; returns how many were replaced. Call it before building the optimizer, which
/// must see the new layers' parameters. Children are replaced in their parent's registry (Sequential through
/// Sequential::replace); a custom module that also keeps its own pointer to a BatchNorm child still calls the old one.
int convert_sync_batchnorm(nn::Module& model, const ProcessGroup& group);

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
