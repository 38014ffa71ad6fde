#pragma once
/// A minimal PNG writer for the examples: 8-bit grayscale, one IDAT chunk compressed with zlib.
#include <cstdint>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace examples {

/// Writes `pixels` (row-major, width * height bytes, 0 = black) as an 8-bit grayscale PNG; throws
/// tapegrad::Error naming the path when the file cannot be written or the sizes disagree.
void write_png_gray8(const std::string& path, std::int64_t width, std::int64_t height,
                     const std::vector<std::uint8_t>& pixels);

/// Tiles images [N, 1, H, W] (values in [low, high], clamped) into a grid of `columns` per row with `padding`
/// pixels of black between and around them, as 8-bit gray; returns {width, height, pixels}.
struct GrayImage {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};
GrayImage image_grid(const tapegrad::Tensor& images, std::int64_t columns, double low = -1.0, double high = 1.0,
                     std::int64_t padding = 2);

}  // namespace examples
