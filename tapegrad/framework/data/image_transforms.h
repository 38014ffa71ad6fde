#pragma once
/// Image transforms for streaming datasets, named as torchvision's: ToTensor, Normalize, RandomCrop,
/// RandomHorizontalFlip, Resize.
#include <tapegrad/export.h>
#include <cstdint>
#include <vector>

#include <tapegrad/framework/data/stream_dataset.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data::transforms {

/// Decoded pixels [H, W, C] with values 0..255 (float32: tapegrad has no uint8 dtype; every value is exact)
/// become float32 [C, H, W] in [0, 1], as torchvision's ToTensor. Every other transform here takes [C, H, W].
class ToTensor : public TensorTransform {
 public:
  Tensor apply(Tensor data, Generator& generator) const override;
};

/// (x - mean[c]) / stddev[c] per channel of float32 [C, H, W]; one value applies to every channel.
class Normalize : public TensorTransform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> stddev);
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}
  Tensor apply(Tensor data, Generator& generator) const override;

 private:
  std::vector<double> mean_, stddev_;
};

/// Pads each side of float32 [C, H, W] by `padding` pixels of `fill`, then cuts a random height x width window
/// (its top row drawn first, then its left column, each uniform over the valid offsets).
class RandomCrop : public TensorTransform {
 public:
  RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding, double fill);
  /// A square crop (torchvision's RandomCrop(size, padding, fill)).
  explicit RandomCrop(std::int64_t size, std::int64_t padding = 0, double fill = 0.0)
      : RandomCrop(size, size, padding, fill) {}
  Tensor apply(Tensor data, Generator& generator) const override;

 private:
  std::int64_t height_, width_, padding_;
  double fill_;
};

/// Mirrors float32 [C, H, W] left-right with probability p (one uniform draw per example).
class RandomHorizontalFlip : public TensorTransform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(Tensor data, Generator& generator) const override;

 private:
  double p_;
};

/// Bilinear resize of float32 [C, H, W] to height x width, with torch's align_corners=false sampling (pixel
/// centres; no antialiasing, as torch.nn.functional.interpolate(mode="bilinear")).
class Resize : public TensorTransform {
 public:
  Resize(std::int64_t height, std::int64_t width);
  /// As torchvision's Resize(size): the shorter side becomes `size`, the longer keeps the aspect ratio
  /// (rounded down, as torchvision does).
  explicit Resize(std::int64_t size);
  Tensor apply(Tensor data, Generator& generator) const override;

 private:
  std::int64_t height_, width_;  // height_ == -1: shorter side = width_
};

}  // namespace tapegrad::data::transforms

TAPEGRAD_API_END
