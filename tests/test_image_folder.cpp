// ImageFolder and the PNG / JPEG decoders: files written here with libpng and libjpeg themselves, class order as
// torchvision's, every colour layout converted, and damaged, truncated, oversized or foreign files refused with
// an error naming the file.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "support/error_of.h"
#include <tapegrad/tapegrad.h>

using namespace tapegrad;
using namespace tapegrad::data;
using Catch::Matchers::Contains;
using tapegrad::testing::error_of;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / fmt::format("tapegrad_test_image_folder_{}_{}", ::getpid(), counter++);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// Pixel (y, x, c) of a test pattern: distinct per position and channel.
std::uint8_t pattern(std::int64_t y, std::int64_t x, std::int64_t c) { return static_cast<std::uint8_t>(40 * y + 7 * x + 90 * c); }

Bytes pattern_pixels(std::int64_t height, std::int64_t width, std::int64_t channels) {
  Bytes pixels;
  for (std::int64_t y = 0; y < height; ++y)
    for (std::int64_t x = 0; x < width; ++x)
      for (std::int64_t c = 0; c < channels; ++c) pixels.push_back(pattern(y, x, c));
  return pixels;
}

// libpng's simplified writer: format PNG_FORMAT_GRAY / RGB / RGBA (8 bits).
void write_png(const fs::path& path, std::uint32_t height, std::uint32_t width, std::uint32_t format, const Bytes& pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr) != 0);
}

// libjpeg at quality 100, grey (1) or RGB (3).
void write_jpeg(const fs::path& path, int height, int width, int channels, const Bytes& pixels, bool progressive = false) {
  jpeg_compress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  FILE* file = std::fopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  jpeg_stdio_dest(&info, file);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = channels;
  info.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 100, TRUE);
  if (progressive) jpeg_simple_progression(&info);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(pixels.data()) + info.next_scanline * width * channels;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::fclose(file);
}

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string decode_error(const Bytes& bytes, int channels = 3, const ImageLimits& limits = {}) {
  return error_of([&] { decode_image(bytes.data(), bytes.size(), channels, "x.img", limits); });
}

}  // namespace

TEST_CASE("PNG decodes exactly in grey, RGB and RGBA, converting to the channels asked for") {
  TempDir dir;
  write_png(dir.path / "rgb.png", 3, 5, PNG_FORMAT_RGB, pattern_pixels(3, 5, 3));
  const Image rgb = read_image((dir.path / "rgb.png").string(), 3);
  CHECK((rgb.height == 3 && rgb.width == 5 && rgb.channels == 3));
  CHECK(rgb.pixels == pattern_pixels(3, 5, 3));
  write_png(dir.path / "grey.png", 4, 2, PNG_FORMAT_GRAY, pattern_pixels(4, 2, 1));
  CHECK(read_image((dir.path / "grey.png").string(), 1).pixels == pattern_pixels(4, 2, 1));
  // Grey to RGB repeats the value in each channel.
  const Image expanded = read_image((dir.path / "grey.png").string(), 3);
  CHECK(expanded.pixels.size() == 4 * 2 * 3);
  CHECK((expanded.pixels[3 * 3] == pattern(1, 1, 0) && expanded.pixels[3 * 3 + 2] == pattern(1, 1, 0)));
  // Opaque RGBA loses its alpha and keeps its colours.
  Bytes rgba = pattern_pixels(2, 2, 4);
  for (std::size_t i = 3; i < rgba.size(); i += 4) rgba[i] = 255;
  write_png(dir.path / "rgba.png", 2, 2, PNG_FORMAT_RGBA, rgba);
  const Image opaque = read_image((dir.path / "rgba.png").string(), 3);
  CHECK(opaque.pixels == Bytes{rgba[0], rgba[1], rgba[2], rgba[4], rgba[5], rgba[6], rgba[8], rgba[9], rgba[10],
                               rgba[12], rgba[13], rgba[14]});
}

TEST_CASE("JPEG decodes grey and RGB (baseline and progressive) within quality-100 rounding") {
  TempDir dir;
  for (bool progressive : {false, true}) {
    write_jpeg(dir.path / "grey.jpg", 16, 16, 1, Bytes(256, 77), progressive);
    const Image grey = read_image((dir.path / "grey.jpg").string(), 1);
    CHECK((grey.height == 16 && grey.width == 16 && grey.channels == 1));
    for (std::uint8_t v : grey.pixels) CHECK(std::abs(int(v) - 77) <= 1);
    Bytes red;
    for (int i = 0; i < 8 * 24; ++i) red.insert(red.end(), {200, 30, 60});
    write_jpeg(dir.path / "red.jpeg", 8, 24, 3, red, progressive);
    const Image rgb = read_image((dir.path / "red.jpeg").string(), 3);
    CHECK((rgb.height == 8 && rgb.width == 24 && rgb.channels == 3));
    for (std::size_t i = 0; i < rgb.pixels.size(); ++i) CHECK(std::abs(int(rgb.pixels[i]) - int(red[i])) <= 3);
  }
}

TEST_CASE("ImageFolder: classes sorted bytewise as torchvision, images sorted, other files skipped") {
  TempDir dir;
  for (const char* name : {"b_shirt", "a_coat", "Z_bag"}) fs::create_directories(dir.path / name);
  write_png(dir.path / "b_shirt" / "2.png", 2, 3, PNG_FORMAT_GRAY, Bytes(6, 10));
  write_png(dir.path / "b_shirt" / "1.PNG", 2, 3, PNG_FORMAT_GRAY, Bytes(6, 20));
  write_jpeg(dir.path / "a_coat" / "x.jpg", 2, 3, 1, Bytes(6, 128));
  write_png(dir.path / "Z_bag" / "only.png", 2, 3, PNG_FORMAT_GRAY, Bytes(6, 30));
  write_bytes(dir.path / "b_shirt" / "notes.txt", {'h', 'i'});
  write_bytes(dir.path / "stray.png", read_bytes(dir.path / "Z_bag" / "only.png"));  // not in a class folder

  const ImageFolder folder(dir.path.string(), ImageFolderOptions{1, {}});
  CHECK(folder.classes() == std::vector<std::string>{"Z_bag", "a_coat", "b_shirt"});
  REQUIRE(folder.size() == 4);
  CHECK(folder.samples()[2].first == (dir.path / "b_shirt" / "1.PNG").string());
  const std::vector<std::int64_t> labels{0, 1, 2, 2};
  const std::vector<float> first_pixel{30, 128, 20, 10};
  for (std::int64_t i = 0; i < 4; ++i) {
    const Example example = folder.get(i);
    CHECK(example.data.shape() == Shape{2, 3, 1});
    CHECK(example.target.data<std::int64_t>()[0] == labels[static_cast<std::size_t>(i)]);
    CHECK(std::abs(example.data.data<float>()[0] - first_pixel[static_cast<std::size_t>(i)]) <= 1.0f);
  }
  CHECK_THAT(error_of([&] { folder.get(4); }), Contains("index 4 out of range for 4 images"));

  // Through ToTensor and the loader with two workers: [B, 1, 2, 3] in [0, 1], labels in order.
  auto loader = make_data_loader(folder.map(transforms::ToTensor()), StreamingLoaderOptions{}.with_batch_size(4).with_workers(2));
  Example batch = *loader->begin();
  CHECK(batch.data.shape() == Shape{4, 1, 2, 3});
  CHECK(batch.data.data<float>()[0] == Approx(30 / 255.0));
  CHECK(std::vector<std::int64_t>(batch.target.data<std::int64_t>(), batch.target.data<std::int64_t>() + 4) == labels);
}

TEST_CASE("ImageFolder refuses a missing root, a root without classes and a class without images") {
  TempDir dir;
  CHECK_THAT(error_of([&] { ImageFolder((dir.path / "missing").string()); }), Contains("is not a directory"));
  CHECK_THAT(error_of([&] { ImageFolder(dir.path.string()); }), Contains("has no class subdirectories"));
  fs::create_directories(dir.path / "empty");
  CHECK_THAT(error_of([&] { ImageFolder(dir.path.string()); }), Contains("class 'empty'") && Contains("has no .png"));
  CHECK_THAT(error_of([&] { ImageFolder(dir.path.string(), ImageFolderOptions{2, {}}); }), Contains("channels must be 1 or 3"));
}

TEST_CASE("damaged, truncated, foreign and oversized images are errors naming the file") {
  TempDir dir;
  write_png(dir.path / "ok.png", 8, 8, PNG_FORMAT_RGB, pattern_pixels(8, 8, 3));
  write_jpeg(dir.path / "ok.jpg", 16, 16, 3, pattern_pixels(16, 16, 3));
  const Bytes png = read_bytes(dir.path / "ok.png"), jpeg = read_bytes(dir.path / "ok.jpg");

  CHECK_THAT(decode_error(Bytes(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2))),
             Contains("x.img") && Contains("PNG"));
  Bytes corrupt = png;
  corrupt[40] ^= 0xff;  // inside IHDR's CRC or the IDAT data: either way libpng refuses it
  CHECK_THAT(decode_error(corrupt), Contains("x.img") && Contains("PNG"));
  // Cut inside the entropy-coded data (libjpeg alone would pad it with grey), and inside the header tables.
  CHECK_THAT(decode_error(Bytes(jpeg.begin(), jpeg.end() - 40)), Contains("x.img: truncated JPEG"));
  CHECK_THAT(decode_error(Bytes(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2))),
             Contains("x.img: damaged JPEG"));
  CHECK_THAT(decode_error(Bytes(jpeg.begin(), jpeg.begin() + 20)), Contains("x.img: damaged JPEG"));
  CHECK_THAT(decode_error(Bytes{'G', 'I', 'F', '8', '9', 'a'}), Contains("x.img: neither PNG nor JPEG"));
  CHECK_THAT(decode_error({}), Contains("neither PNG nor JPEG"));

  // Limits are checked from the header, before pixels are allocated.
  ImageLimits small;
  small.max_side = 4;
  CHECK_THAT(decode_error(png, 3, small), Contains("x.img: PNG image of 8 x 8 pixels is over the limits"));
  CHECK_THAT(decode_error(jpeg, 3, small), Contains("x.img: JPEG image of 16 x 16 pixels is over the limits"));
  // A PNG header claiming 100000 x 100000 (with a valid CRC) under the default limits.
  Bytes huge = png;
  for (int at : {16, 20}) {
    const std::uint32_t side = 100000;
    for (int b = 0; b < 4; ++b) huge[at + b] = static_cast<std::uint8_t>(side >> (24 - 8 * b));
  }
  const std::uint32_t crc = static_cast<std::uint32_t>(crc32(0, huge.data() + 12, 17));
  for (int b = 0; b < 4; ++b) huge[29 + b] = static_cast<std::uint8_t>(crc >> (24 - 8 * b));
  CHECK_THAT(decode_error(huge), Contains("100000 x 100000 pixels is over the limits"));

  // Through ImageFolder, the message names the file's path; the file size limit is checked before reading.
  fs::create_directories(dir.path / "root" / "c");
  write_bytes(dir.path / "root" / "c" / "bad.png", Bytes(png.begin(), png.begin() + 50));
  const ImageFolder folder((dir.path / "root").string());
  CHECK_THAT(error_of([&] { folder.get(0); }), Contains((dir.path / "root" / "c" / "bad.png").string()));
  ImageLimits tiny_files;
  tiny_files.max_file_bytes = 10;
  CHECK_THAT(error_of([&] { read_image((dir.path / "ok.png").string(), 3, tiny_files); }),
             Contains("ok.png") && Contains("over the limit of 10"));
  CHECK_THAT(error_of([&] { read_image((dir.path / "none.png").string()); }), Contains("cannot open") && Contains("none.png"));
}
