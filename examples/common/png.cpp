#include "common/png.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace examples {

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xffu));
}

// A chunk: length, type, data, and the CRC-32 of type and data (zlib's crc32 is PNG's).
void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, static_cast<std::uint32_t>(
                   crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

}  // namespace

void write_png_gray8(const std::string& path, std::int64_t width, std::int64_t height,
                     const std::vector<std::uint8_t>& pixels) {
  if (width < 1 || height < 1 || width > (1 << 24) || height > (1 << 24) ||
      static_cast<std::int64_t>(pixels.size()) != width * height)
    throw tapegrad::Error(fmt::format("write_png_gray8 {}: {} pixels for a {} x {} image", path, pixels.size(), width,
                                      height));
  // Each scanline starts with its filter type; 0 (none) keeps the writer minimal.
  std::string raw;
  raw.reserve(static_cast<std::size_t>((width + 1) * height));
  for (std::int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels.data() + y * width), static_cast<std::size_t>(width));
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
    throw tapegrad::Error(fmt::format("write_png_gray8 {}: zlib could not compress the image", path));
  packed.resize(packed_size);

  std::string header;
  put_u32(header, static_cast<std::uint32_t>(width));
  put_u32(header, static_cast<std::uint32_t>(height));
  header += std::string{'\x08', '\x00', '\x00', '\x00', '\x00'};  // 8 bits, grayscale, deflate, adaptive, no interlace
  std::string file = "\x89PNG\r\n\x1a\n";
  put_chunk(file, "IHDR", header);
  put_chunk(file, "IDAT", packed);
  put_chunk(file, "IEND", "");
  std::ofstream out(path, std::ios::binary);
  out.write(file.data(), static_cast<std::streamsize>(file.size()));
  if (!out.good()) throw tapegrad::Error(fmt::format("write_png_gray8: cannot write {}", path));
}

GrayImage image_grid(const tapegrad::Tensor& images, std::int64_t columns, double low, double high,
                     std::int64_t padding) {
  if (images.dim() != 4 || images.size(1) != 1 || images.size(0) < 1 || columns < 1 || !(high > low))
    throw tapegrad::Error(fmt::format("image_grid: expected images [N, 1, H, W] and columns >= 1, got {}",
                                      tapegrad::shape_string(images.shape())));
  const std::int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const std::int64_t rows = (n + columns - 1) / columns;
  GrayImage grid;
  grid.width = columns * (w + padding) + padding;
  grid.height = rows * (h + padding) + padding;
  grid.pixels.assign(static_cast<std::size_t>(grid.width * grid.height), 0);
  const std::vector<double> values = images.to_vector();
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t top = padding + (k / columns) * (h + padding), left = padding + (k % columns) * (w + padding);
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) {
        const double v = (values[static_cast<std::size_t>((k * h + y) * w + x)] - low) / (high - low);
        grid.pixels[static_cast<std::size_t>((top + y) * grid.width + left + x)] =
            static_cast<std::uint8_t>(std::lround(255.0 * std::clamp(v, 0.0, 1.0)));
      }
  }
  return grid;
}

}  // namespace examples
