#include <tapegrad/framework/data/augment.h>

#include <algorithm>

#include <tapegrad/framework/data/sampler.h>
#include <tapegrad/framework/error.h>

namespace tapegrad::data {

Tensor augment(const Tensor& images, const Augmentation& augmentation, Generator& generator) {
  images.check_defined("augment");
  if (images.dtype() != DType::Float32 || images.dim() != 4)
    fail("augment: expected float32 images [B, C, H, W], got {} {}", dtype_name(images.dtype()),
         shape_string(images.shape()));
  if (augmentation.crop_padding < 0)
    fail("augment: crop_padding must be non-negative, got {}", augmentation.crop_padding);
  const std::int64_t batch = images.size(0), channels = images.size(1), height = images.size(2),
                     width = images.size(3), pad = augmentation.crop_padding;
  Tensor out = empty(images.shape(), DType::Float32);
  const Tensor values = images.contiguous();  // a view's values, in row-major order
  const float* in = values.data<float>();
  float* target = out.data<float>();
  const auto fill = static_cast<float>(augmentation.fill);
  for (std::int64_t b = 0; b < batch; ++b) {
    // The crop window starts at (top, left) in padded coordinates; shift it back to source coordinates.
    std::int64_t shift_y = 0, shift_x = 0;
    if (pad > 0) {
      shift_y = random_below(generator, 2 * pad + 1) - pad;
      shift_x = random_below(generator, 2 * pad + 1) - pad;
    }
    const bool flip = augmentation.horizontal_flip && random_below(generator, 2) == 1;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float* plane = in + (b * channels + c) * height * width;
      float* out_plane = target + (b * channels + c) * height * width;
      for (std::int64_t y = 0; y < height; ++y) {
        float* row = out_plane + y * width;
        const std::int64_t source_y = y + shift_y;
        if (source_y < 0 || source_y >= height) {
          std::fill(row, row + width, fill);
          continue;
        }
        const float* source_row = plane + source_y * width;
        // Columns x with 0 <= x + shift_x < width come from the image; the rest are padding.
        const std::int64_t first = std::clamp<std::int64_t>(-shift_x, 0, width);
        const std::int64_t last = std::clamp<std::int64_t>(width - shift_x, 0, width);
        std::fill(row, row + first, fill);
        std::copy(source_row + first + shift_x, source_row + last + shift_x, row + first);
        std::fill(row + last, row + width, fill);
        // Note: flipping after the crop equals cropping the flipped image with the mirrored offset.
        if (flip) std::reverse(row, row + width);
      }
    }
  }
  return out;
}

}  // namespace tapegrad::data
