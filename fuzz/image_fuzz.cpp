// libFuzzer target for ImageFolder's decoders (libpng's simplified API, libjpeg-turbo behind setjmp): whatever
// bytes a file holds, decode_image() returns an image of the size its header gave or throws tapegrad::Error.
// Anything else (a crash, a sanitizer report, another exception, a hang) is a bug.
// Note: the limits are tighter than the defaults (1 Mi pixels) so that one execution stays fast; the checks
// they exercise are the same. Both channel counts run, since grey and RGB take different conversion paths.
// Seeds: fuzz/image_seeds.cpp writes valid PNG and JPEG files of each kind ImageFolder meets.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <tapegrad/tapegrad.h>

using namespace tapegrad;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  data::ImageLimits limits;
  limits.max_side = 4096;
  limits.max_pixels = std::int64_t{1} << 20;
  for (int channels : {1, 3}) {
    try {
      const data::Image image = data::decode_image(bytes, size, channels, "fuzz", limits);
      if (image.channels != channels || image.height <= 0 || image.width <= 0 ||
          image.height * image.width > limits.max_pixels ||
          static_cast<std::int64_t>(image.pixels.size()) != image.height * image.width * channels)
        std::abort();
    } catch (const Error&) {
    }
  }
  return 0;
}
