#include <tapegrad/framework/data/data_loader.h>

#include <algorithm>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options)
    : DataLoader(dataset,
                 options.shuffle ? std::shared_ptr<const IndexSampler>(std::make_shared<RandomSampler>(dataset.size(), options.seed))
                                 : std::make_shared<SequentialSampler>(dataset.size()),
                 options) {}

DataLoader::DataLoader(TensorDataset dataset, std::shared_ptr<const IndexSampler> sampler, DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  if (!sampler_) fail("DataLoader: expected a sampler, got null");
  if (options_.batch_size <= 0) fail("DataLoader: batch_size must be positive, got {}", options_.batch_size);
  if (options_.augmentation.crop_padding < 0)
    fail("DataLoader: crop_padding must be non-negative, got {}", options_.augmentation.crop_padding);
  if (options_.augmentation.enabled() && (dataset_.images().dtype() != DType::Float32 || dataset_.images().dim() != 4))
    fail("DataLoader: augmentation needs float32 images [N, C, H, W], got {} {}",
         dtype_name(dataset_.images().dtype()), shape_string(dataset_.images().shape()));
}

std::int64_t DataLoader::size() const {
  const std::int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  const std::uint64_t epoch = next_epoch_++;
  order_ = sampler_->indices(epoch);
  if (static_cast<std::int64_t>(order_.size()) != sampler_->size())
    fail("DataLoader: the sampler promised {} indices for epoch {} but gave {}", sampler_->size(), epoch,
         order_.size());
  batches_ = size();
  augment_generator_.manual_seed(epoch_seed(options_.seed, epoch, /*stream=*/1));
  Iterator it(this);
  if (batches_ > 0) load_batch(0);
  return it;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (++position_ < loader_->batches_) loader_->load_batch(position_);
  return *this;
}

void DataLoader::load_batch(std::int64_t position) {
  const std::int64_t start = position * options_.batch_size;
  const std::int64_t count = std::min<std::int64_t>(options_.batch_size, static_cast<std::int64_t>(order_.size()) - start);
  batch_ = dataset_.get_batch(order_.data() + start, count);
  if (options_.augmentation.enabled())
    batch_.images = augment(batch_.images, options_.augmentation, augment_generator_);
}

}  // namespace tapegrad::data
