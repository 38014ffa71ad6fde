// Precise BatchNorm statistics: per-channel count, mean and squared deviations accumulated over a data pass.
#include <tapegrad/layers/batch_norm_statistics.h>

#include <algorithm>
#include <string>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/layers/batch_norm.h>

namespace tapegrad::nn {

namespace {

/// Running per-channel statistics of every value seen so far.
struct ChannelStatistics {
  std::int64_t count = 0;  // values per channel
  std::int64_t batches = 0;
  std::vector<double> mean, squared_deviations;
};

// Note: a two-pass mean and sum of squared deviations per channel within the batch, then Chan et al.'s exact
// combination with what came before: delta = mean_b - mean_a, mean += delta * n_b / n,
// M2 = M2_a + M2_b + delta^2 * n_a * n_b / n. Stable in double for any split of the data into batches.
void accumulate(ChannelStatistics& statistics, const Tensor& input) {
  const Tensor x = input.dtype() == DType::Float64 ? input : input.to(DType::Float64);
  const std::int64_t batch = x.size(0), channels = x.size(1);
  const std::int64_t inner = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  const std::int64_t n_b = batch * inner;
  if (n_b == 0) return;
  if (statistics.mean.empty()) {
    statistics.mean.assign(static_cast<std::size_t>(channels), 0.0);
    statistics.squared_deviations.assign(static_cast<std::size_t>(channels), 0.0);
  }
  const double* data = x.data<double>();
  const std::int64_t n_a = statistics.count, n = n_a + n_b;
  for (std::int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < batch; ++i) {
      const double* row = data + (i * channels + c) * inner;
      for (std::int64_t l = 0; l < inner; ++l) sum += row[l];
    }
    const double mean_b = sum / static_cast<double>(n_b);
    double m2_b = 0.0;
    for (std::int64_t i = 0; i < batch; ++i) {
      const double* row = data + (i * channels + c) * inner;
      for (std::int64_t l = 0; l < inner; ++l) m2_b += (row[l] - mean_b) * (row[l] - mean_b);
    }
    const auto k = static_cast<std::size_t>(c);
    const double delta = mean_b - statistics.mean[k];
    statistics.mean[k] += delta * static_cast<double>(n_b) / static_cast<double>(n);
    statistics.squared_deviations[k] +=
        m2_b + delta * delta * static_cast<double>(n_a) * static_cast<double>(n_b) / static_cast<double>(n);
  }
  statistics.count = n;
  ++statistics.batches;
}

/// Removes the observers however the pass ends.
struct ObserverGuard {
  std::vector<BatchNormBase*>& layers;
  ~ObserverGuard() {
    for (BatchNormBase* layer : layers) layer->set_input_observer({});
  }
};

}  // namespace

std::int64_t recompute_batchnorm_statistics(Module& model, const BatchSource& next_batch,
                                            std::optional<std::int64_t> max_batches) {
  if (max_batches && *max_batches < 1)
    fail("recompute_batchnorm_statistics: max_batches must be at least 1, got {}", *max_batches);
  std::vector<BatchNormBase*> layers;
  std::vector<std::string> names;
  for (auto& [name, module] : model.named_modules()) {
    auto* bn = dynamic_cast<BatchNormBase*>(module);
    // Note: a layer registered under two names is one layer: it gets one observer and one set of statistics.
    const bool seen = std::find(layers.begin(), layers.end(), bn) != layers.end();
    if (bn && !seen && bn->options().track_running_stats && !bn->frozen()) {
      layers.push_back(bn);
      names.push_back(name.empty() ? std::string("<root>") : name);
    }
  }
  if (layers.empty())
    fail("recompute_batchnorm_statistics: {} has no BatchNorm with running statistics that is not frozen",
         model.type_name());

  std::vector<ChannelStatistics> statistics(layers.size());
  std::int64_t batches = 0;
  {
    ObserverGuard guard{layers};
    for (std::size_t i = 0; i < layers.size(); ++i)
      layers[i]->set_input_observer([&statistics, i](const Tensor& input) { accumulate(statistics[i], input); });
    NoGradGuard no_grad;
    while (!max_batches || batches < *max_batches) {
      const Tensor input = next_batch();
      if (!input.defined()) break;
      model.forward(input);
      ++batches;
    }
  }
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (statistics[i].count < 2)
      fail("recompute_batchnorm_statistics: {} '{}' saw {} value{} per channel in {} batch{}; the unbiased variance "
           "needs at least 2",
           layers[i]->type_name(), names[i], statistics[i].count, statistics[i].count == 1 ? "" : "s", batches,
           batches == 1 ? "" : "es");

  NoGradGuard no_grad;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    BatchNormBase& bn = *layers[i];
    const ChannelStatistics& s = statistics[i];
    std::vector<double> variance(s.squared_deviations.size());
    for (std::size_t c = 0; c < variance.size(); ++c)
      variance[c] = s.squared_deviations[c] / static_cast<double>(s.count - 1);
    const TensorOptions as_double = TensorOptions{}.with_dtype(DType::Float64);
    const Shape channels{static_cast<std::int64_t>(variance.size())};
    bn.running_mean.copy_(from_vector(s.mean, channels, as_double).to(bn.running_mean.dtype()));
    bn.running_var.copy_(from_vector(variance, channels, as_double).to(bn.running_var.dtype()));
    bn.num_batches_tracked.fill_(static_cast<double>(s.batches));
  }
  return batches;
}

std::int64_t recompute_batchnorm_statistics(Module& model, data::DataLoader& loader,
                                            std::optional<std::int64_t> max_batches) {
  // Note: the iterator advances only when the next batch is asked for, after the model has used the last one.
  std::optional<data::DataLoader::Iterator> position;
  const BatchSource next_batch = [&]() -> Tensor {
    if (!position)
      position = loader.begin();
    else
      ++*position;
    if (*position == loader.end()) return Tensor();
    return (*position)->images;
  };
  return recompute_batchnorm_statistics(model, next_batch, max_batches);
}

}  // namespace tapegrad::nn
