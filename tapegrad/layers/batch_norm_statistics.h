#pragma once
/// recompute_batchnorm_statistics: exact population statistics for every BatchNorm, from a pass over data.
#include <tapegrad/export.h>
#include <cstdint>
#include <functional>
#include <optional>

#include <tapegrad/framework/data/data_loader.h>
#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::nn {

/// Gives the next input batch for model.forward(), or an undefined Tensor when the data is exhausted.
using BatchSource = std::function<Tensor()>;

/// Note: precise BatchNorm statistics. One pass over the data under NoGradGuard with the rest of the model as it
/// is (its weights, and its mode: an eval model keeps dropout off); each recomputed BatchNorm normalizes with its
/// batch's statistics, as in training, so a BatchNorm behind another sees the inputs it sees in training. Every
/// input it gets is accumulated per channel in double (Chan's pairwise update of count, mean and squared
/// deviations), so the result is the mean and the unbiased variance (divisor: total count - 1) of all values the
/// layer saw, whatever the batch sizes; not an average of per-batch statistics, and no EMA. The new values then
/// replace running_mean and running_var, and num_batches_tracked becomes the number of batches the layer saw.
/// Frozen layers and layers without running statistics are left alone. Nothing changes when anything throws.
/// Every batch needs more than one value per channel (as in training); the model's mode is never changed.

/// Recomputes the running statistics of `model`'s BatchNorm layers over the batches `next_batch` yields
/// (at most `max_batches`, every batch when nullopt); returns the number of batches run. Throws when no layer
/// has statistics to recompute, max_batches < 1, or a layer saw fewer than 2 values per channel in all.
std::int64_t recompute_batchnorm_statistics(Module& model, const BatchSource& next_batch,
                                            std::optional<std::int64_t> max_batches = std::nullopt);

/// Same over one epoch of `loader` (its next epoch: the loader advances), feeding each batch's images.
std::int64_t recompute_batchnorm_statistics(Module& model, data::DataLoader& loader,
                                            std::optional<std::int64_t> max_batches = std::nullopt);

}  // namespace tapegrad::nn

TAPEGRAD_API_END
