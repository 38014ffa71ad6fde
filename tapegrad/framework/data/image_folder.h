#pragma once
/// ImageFolder: root/<class>/<image> files (PNG, JPEG) read and decoded one at a time, as torchvision's ImageFolder.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <tapegrad/framework/data/stream_dataset.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// What an image may cost before it is decoded; a file past a limit is refused with an error naming it.
struct ImageLimits {
  std::int64_t max_file_bytes = std::int64_t{64} << 20;  ///< 64 MiB
  std::int64_t max_side = 16384;                          ///< width and height, each
  std::int64_t max_pixels = std::int64_t{64} << 20;       ///< width x height: 64 Mi (a 8192 x 8192 image)
};

/// Decoded pixels: row-major [height, width, channels], 8 bits each.
struct Image {
  std::int64_t height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;
};

/// Decodes a PNG (libpng) or JPEG (libjpeg-turbo) held in memory, told apart by its first bytes, converting to
/// `channels` (1: grey, 3: RGB; colour to grey by the library's own conversion, alpha dropped). `name` (a file
/// path) is only used in messages. Every failure, including a truncated or damaged file and a size past `limits`
/// (checked from the header, before any pixel buffer is allocated), is a tapegrad::Error naming `name`.
Image decode_image(const std::uint8_t* bytes, std::size_t size, int channels, const std::string& name,
                   const ImageLimits& limits = {});
/// Reads and decodes one file (its size checked against limits.max_file_bytes before it is read).
Image read_image(const std::string& path, int channels = 3, const ImageLimits& limits = {});

/// How an ImageFolder reads.
struct ImageFolderOptions {
  /// 3 decodes every image as RGB (torchvision's default loader converts to RGB); 1 as grey.
  int channels = 3;
  ImageLimits limits{};
};

/// Note: as torchvision's ImageFolder, the classes are the subdirectories of `root` sorted by name (bytewise),
/// class i being the i-th; the examples are each class's files with a .png, .jpg or .jpeg extension (any
/// case), sorted by name, classes in order; other files are skipped, and a class without one image is an error.
/// Only the list of paths is held in memory: get(i) reads and decodes file i, returning data float32 [H, W, C]
/// valued 0..255 (map transforms::ToTensor() to get [C, H, W] in [0, 1]) and target int64 scalar, its class.
/// get is safe to call from several threads.
class ImageFolder : public Dataset<ImageFolder> {
 public:
  explicit ImageFolder(const std::string& root, ImageFolderOptions options = {});
  Example get(std::int64_t index) const override;
  std::int64_t size() const override { return static_cast<std::int64_t>(samples_.size()); }
  /// Class names, by index.
  const std::vector<std::string>& classes() const { return classes_; }
  /// Each example's path and class, in order.
  const std::vector<std::pair<std::string, std::int64_t>>& samples() const { return samples_; }

 private:
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, std::int64_t>> samples_;
  ImageFolderOptions options_;
};

}  // namespace tapegrad::data

TAPEGRAD_API_END
