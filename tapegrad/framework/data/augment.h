#pragma once
/// Simple image augmentation for mini-batches: random crop with padding, random horizontal flip.
#include <tapegrad/export.h>
#include <cstdint>

#include <tapegrad/framework/generator.h>
#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// Which augmentations to apply; the default applies none.
struct Augmentation {
  /// Pad each side by this many pixels of `fill`, then crop a random H x W window (0: no crop).
  std::int64_t crop_padding = 0;
  /// Mirror each image left-right with probability 1/2.
  bool horizontal_flip = false;
  /// The value of padded pixels. Note: after normalisation a black pixel is -mean/std, not 0
  /// (FashionMNIST::background() gives it).
  double fill = 0.0;
  bool enabled() const { return crop_padding > 0 || horizontal_flip; }
};

/// An augmented copy of float32 images [B, C, H, W]. Each image draws its own crop offset (two draws in
/// [0, 2*padding]) and then its flip (one draw) from `generator`, in batch order; all channels share them.
Tensor augment(const Tensor& images, const Augmentation& augmentation, Generator& generator);

}  // namespace tapegrad::data

TAPEGRAD_API_END
