#include <tapegrad/framework/data/dataset.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <tapegrad/framework/data/idx.h>

namespace tapegrad::data {
namespace {

/// Bytes of one example (row 0 of the leading dim) of `t`.
std::size_t row_bytes(const Tensor& t) {
  std::int64_t row = 1;
  for (std::int64_t d = 1; d < t.dim(); ++d) row *= t.size(d);
  return static_cast<std::size_t>(row) * element_size(t.dtype());
}

/// Rows `indices` of `source`, gathered into a new contiguous tensor of shape [count, ...].
Tensor gather_rows(const Tensor& source, const std::int64_t* indices, std::int64_t count) {
  Shape shape = source.shape();
  shape[0] = count;
  Tensor out = empty(shape, source.dtype());
  const std::size_t bytes = row_bytes(source);
  const Tensor values = source.contiguous();  // a view's values, in row-major order
  const auto* from = static_cast<const unsigned char*>(values.raw_data());
  auto* to = static_cast<unsigned char*>(out.raw_data());
  for (std::int64_t i = 0; i < count; ++i)
    std::memcpy(to + static_cast<std::size_t>(i) * bytes, from + static_cast<std::size_t>(indices[i]) * bytes, bytes);
  return out;
}

}  // namespace

TensorDataset::TensorDataset(Tensor images, Tensor labels) : images_(std::move(images)), labels_(std::move(labels)) {
  images_.check_defined("TensorDataset");
  labels_.check_defined("TensorDataset");
  if (images_.dim() == 0 || labels_.dim() == 0)
    fail("TensorDataset: images {} and labels {} need a leading example dim", shape_string(images_.shape()),
         shape_string(labels_.shape()));
  if (images_.size(0) != labels_.size(0))
    fail("TensorDataset: images {} and labels {} hold different numbers of examples ({} != {})",
         shape_string(images_.shape()), shape_string(labels_.shape()), images_.size(0), labels_.size(0));
  // Note: the dataset keeps values, not history; gathering copies raw bytes, which autograd cannot see.
  images_ = images_.detach();
  labels_ = labels_.detach();
}

TensorDataset TensorDataset::head(std::int64_t count) const {
  if (count < 0) fail("TensorDataset::head: count must be >= 0, got {}", count);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(std::min(count, size())));
  std::iota(indices.begin(), indices.end(), 0);
  Batch batch = get_batch(indices);
  return TensorDataset(std::move(batch.images), std::move(batch.labels));
}

Batch TensorDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  return get_batch(indices.data(), static_cast<std::int64_t>(indices.size()));
}

Batch TensorDataset::get_batch(const std::int64_t* indices, std::int64_t count) const {
  const std::int64_t n = size();
  for (std::int64_t i = 0; i < count; ++i)
    if (indices[i] < 0 || indices[i] >= n)
      fail("TensorDataset::get_batch: index {} is out of range for a dataset of {} examples", indices[i], n);
  return {gather_rows(images_, indices, count), gather_rows(labels_, indices, count)};
}

namespace {

Batch load_fashion_mnist(Split split, const FashionMnistOptions& options) {
  const std::filesystem::path dir = fashion_mnist_dir(options.dir);
  const char* prefix = split == Split::Train ? "train" : "t10k";
  const std::string images_path = (dir / fmt::format("{}-images-idx3-ubyte.gz", prefix)).string();
  const std::string labels_path = (dir / fmt::format("{}-labels-idx1-ubyte.gz", prefix)).string();
  Batch loaded{read_idx_images(images_path), read_idx_labels(labels_path)};
  if (loaded.images.size(2) != 28 || loaded.images.size(3) != 28)
    fail("FashionMNIST: {}: images are {}x{}, expected 28x28", images_path, loaded.images.size(2),
         loaded.images.size(3));
  if (loaded.images.size(0) != loaded.labels.size(0))
    fail("FashionMNIST: {} holds {} images but {} holds {} labels", images_path, loaded.images.size(0), labels_path,
         loaded.labels.size(0));
  const std::int64_t* labels = loaded.labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < loaded.labels.numel(); ++i)
    if (labels[i] > 9) fail("FashionMNIST: {}: label {} at index {} is not a class in 0..9", labels_path, labels[i], i);
  if (options.normalize) {
    if (!(options.stddev > 0)) fail("FashionMNIST: stddev must be positive, got {}", options.stddev);
    float* pixels = loaded.images.data<float>();
    const auto mean = static_cast<float>(options.mean);
    const auto inverse_std = static_cast<float>(1.0 / options.stddev);
    for (std::int64_t i = 0; i < loaded.images.numel(); ++i) pixels[i] = (pixels[i] - mean) * inverse_std;
  }
  return loaded;
}

}  // namespace

FashionMNIST::FashionMNIST(Split split, const FashionMnistOptions& options)
    : FashionMNIST(load_fashion_mnist(split, options), options.normalize ? -options.mean / options.stddev : 0.0) {}

FashionMNIST::FashionMNIST(Batch loaded, double background)
    : TensorDataset(std::move(loaded.images), std::move(loaded.labels)), background_(background) {}

const std::array<std::string_view, 10>& FashionMNIST::class_names() {
  static const std::array<std::string_view, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                         "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

std::array<double, 2> pixel_mean_std(const Tensor& images) {
  images.check_defined("pixel_mean_std");
  if (images.dtype() != DType::Float32 || images.numel() == 0)
    fail("pixel_mean_std: expected a non-empty float32 tensor, got {} {}", dtype_name(images.dtype()),
         shape_string(images.shape()));
  // Note: two passes in double, so 47 million float pixels lose no precision to cancellation.
  const float* pixels = images.data<float>();
  const std::int64_t n = images.numel();
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += pixels[i];
  const double mean = sum / static_cast<double>(n);
  double squares = 0.0;
  for (std::int64_t i = 0; i < n; ++i) squares += (pixels[i] - mean) * (pixels[i] - mean);
  return {mean, std::sqrt(squares / static_cast<double>(n))};
}

}  // namespace tapegrad::data
