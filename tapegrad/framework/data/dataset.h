#pragma once
/// Datasets held in memory as tensors, and the Fashion-MNIST loader.
#include <tapegrad/export.h>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// One mini-batch: images [B, ...] and labels [B], both contiguous and freshly allocated.
struct Batch {
  Tensor images;
  Tensor labels;
};

/// A dataset of `size()` examples: row i of `images` goes with row i of `labels`.
/// Note: the tensors are handles; the dataset shares their storage (no copy) and never writes to it.
class TensorDataset {
 public:
  /// Checks that both tensors have a leading dim of the same extent.
  TensorDataset(Tensor images, Tensor labels);
  /// Number of examples.
  std::int64_t size() const { return images_.size(0); }
  /// The examples at `indices`, in that order, gathered row by row with memcpy (repeats allowed).
  Batch get_batch(const std::vector<std::int64_t>& indices) const;
  /// Same, for the `count` indices starting at `indices`.
  Batch get_batch(const std::int64_t* indices, std::int64_t count) const;
  /// The first `count` examples (all of them when count >= size()), copied: for a quick run on a subset.
  /// A negative count is an error.
  TensorDataset head(std::int64_t count) const;
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 private:
  Tensor images_;
  Tensor labels_;
};

/// Mean and standard deviation of the 60,000 Fashion-MNIST training pixels scaled to [0, 1]
/// (measured: 0.286041 and 0.353024; see tests/test_data.cpp).
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

/// Which half of Fashion-MNIST: 60,000 training or 10,000 test images.
enum class Split { Train, Test };

/// How FashionMNIST loads: where from, and whether to normalise pixels to (x - mean) / stddev.
struct FashionMnistOptions {
  std::string dir;  ///< "" means fashion_mnist_dir(): $TAPEGRAD_FASHION_MNIST or the Debian location.
  bool normalize = true;
  double mean = kFashionMnistMean;
  double stddev = kFashionMnistStd;
};

/// Fashion-MNIST as a TensorDataset: images float32 [N, 1, 28, 28], labels int64 [N] in 0..9.
class FashionMNIST : public TensorDataset {
 public:
  /// Reads the split's two gzip IDX files and checks that they agree (count, 28x28, labels below 10).
  explicit FashionMNIST(Split split, const FashionMnistOptions& options = {});
  /// The value a black pixel holds after loading: 0, or -mean/stddev when normalised. Pad crops with it.
  double background() const { return background_; }
  /// The ten class names, by label.
  static const std::array<std::string_view, 10>& class_names();

 private:
  FashionMNIST(Batch loaded, double background);
  double background_;
};

/// Mean and population standard deviation over all values of a float32 tensor, accumulated in double.
std::array<double, 2> pixel_mean_std(const Tensor& images);

}  // namespace tapegrad::data

TAPEGRAD_API_END
