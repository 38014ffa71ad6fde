// Seeds for image_fuzz and csv_fuzz (linked into fuzz_seeds, whose main is in make_seeds.cpp): valid PNG and JPEG files in the
// forms ImageFolder meets (grey, RGB, RGBA, palette, 16-bit, interlaced; baseline and progressive JPEG, grey and
// colour, odd sizes), and CSV tables in the forms CsvDataset accepts, so that libFuzzer mutates real structure
// (chunk lists, Huffman tables, scan headers, quoted-looking fields) instead of discovering it from nothing.
#include <png.h>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared before it
#include <jpeglib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes pattern(std::uint32_t height, std::uint32_t width, std::uint32_t channels, std::uint32_t bytes_per_sample = 1) {
  Bytes pixels(std::size_t{height} * width * channels * bytes_per_sample);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
  return pixels;
}

void write(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// libpng's simplified writer (format: PNG_FORMAT_GRAY, _RGB, _RGBA, with PNG_FORMAT_FLAG_LINEAR for 16 bits or
// PNG_FORMAT_FLAG_COLORMAP for a palette image).
void png_seed(const fs::path& path, std::uint32_t height, std::uint32_t width, std::uint32_t format) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  const bool colormap = (format & PNG_FORMAT_FLAG_COLORMAP) != 0;
  const Bytes pixels = pattern(height, width, colormap ? 1 : PNG_IMAGE_SAMPLE_CHANNELS(format),
                               colormap ? 1 : PNG_IMAGE_SAMPLE_COMPONENT_SIZE(format));
  Bytes palette;
  if (colormap) {
    image.colormap_entries = 256;
    palette = pattern(1, 256, 3);
  }
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, colormap ? palette.data() : nullptr))
    throw std::runtime_error("png size: " + std::string(image.message));
  Bytes out(size);
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, colormap ? palette.data() : nullptr))
    throw std::runtime_error("png write: " + std::string(image.message));
  write(path, out.data(), size);
}

void jpeg_seed(const fs::path& path, int height, int width, int channels, int quality, bool progressive) {
  const Bytes pixels = pattern(static_cast<std::uint32_t>(height), static_cast<std::uint32_t>(width),
                               static_cast<std::uint32_t>(channels));
  jpeg_compress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);  // the default error handler exits: fine for a seed writer, inputs are ours
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = channels;
  info.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  if (progressive) jpeg_simple_progression(&info);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(pixels.data()) + std::size_t{info.next_scanline} * width * channels;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  write(path, buffer, size);
  std::free(buffer);
}

}  // namespace

void image_seeds(const fs::path& dir) {
  png_seed(dir / "grey-5x7.png", 5, 7, PNG_FORMAT_GRAY);
  png_seed(dir / "rgb-8x3.png", 8, 3, PNG_FORMAT_RGB);
  png_seed(dir / "rgba-4x4.png", 4, 4, PNG_FORMAT_RGBA);
  png_seed(dir / "palette-6x6.png", 6, 6, PNG_FORMAT_RGB_COLORMAP);
  png_seed(dir / "grey16-3x5.png", 3, 5, PNG_FORMAT_LINEAR_Y);
  png_seed(dir / "rgb-28x28.png", 28, 28, PNG_FORMAT_RGB);
  jpeg_seed(dir / "grey-8x8.jpg", 8, 8, 1, 90, false);
  jpeg_seed(dir / "rgb-17x9.jpg", 17, 9, 3, 75, false);
  jpeg_seed(dir / "rgb-16x16-progressive.jpg", 16, 16, 3, 90, true);
  jpeg_seed(dir / "grey-28x28-progressive.jpg", 28, 28, 1, 50, true);
}

void csv_seeds(const fs::path& dir) {
  // csv_fuzz reads its input with target column "label"; one file per accepted form, and a few near misses.
  const std::vector<std::pair<std::string, std::string>> files = {
      {"plain.csv", "a,b,label\n1,2,0\n3.5,-4e2,1\n"},
      {"crlf.csv", "x,label,y\r\n0.25,2,7\r\n\r\n1e-3,0,-0\r\n"},
      {"spaces.csv", "f1 , label ,f2\n  1 , 3 ,  2\n4,1,5\n"},
      {"header-only.csv", "a,label\n"},
      {"ragged.csv", "a,label\n1,2,3\n"},
      {"not-a-number.csv", "a,label\nnan,1\ninf,2\n0x10,3\n"},
      {"wide.csv", "c0,c1,c2,c3,c4,c5,c6,c7,label\n" + std::string("1,2,3,4,5,6,7,8,9\n") + "9,8,7,6,5,4,3,2,1\n"},
  };
  for (const auto& [name, text] : files) write(dir / name, text.data(), text.size());
}
