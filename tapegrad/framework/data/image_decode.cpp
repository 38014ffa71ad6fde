// PNG and JPEG decoding for ImageFolder, through Debian's libpng and libjpeg-turbo (private dependencies: no
// public header includes <png.h> or <jpeglib.h>).
#include <tapegrad/framework/data/image_folder.h>

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <tapegrad/framework/error.h>

namespace tapegrad::data {
namespace {

void check_size(std::int64_t width, std::int64_t height, const std::string& name, const char* format,
                const ImageLimits& limits) {
  if (width <= 0 || height <= 0)
    fail("decode_image: {}: {} header gives an empty image ({} x {})", name, format, width, height);
  if (width > limits.max_side || height > limits.max_side || width * height > limits.max_pixels)
    fail("decode_image: {}: {} image of {} x {} pixels is over the limits ({} per side, {} pixels; ImageLimits)",
         name, format, width, height, limits.max_side, limits.max_pixels);
}

Image decode_png(const std::uint8_t* bytes, std::size_t size, int channels, const std::string& name,
                 const ImageLimits& limits) {
  // Note: libpng's simplified API reports errors through image.message instead of longjmp, and handles every
  // colour type, bit depth, palette and interlacing by itself.
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes, size))
    fail("decode_image: {}: not a readable PNG ({})", name, image.message);
  try {
    check_size(image.width, image.height, name, "PNG", limits);
  } catch (...) {
    png_image_free(&image);
    throw;
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image out;
  out.height = image.height;
  out.width = image.width;
  out.channels = channels;
  // Zeroed: an alpha channel is composited onto this buffer, that is onto black.
  out.pixels.assign(PNG_IMAGE_SIZE(image), 0);
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr))
    fail("decode_image: {}: damaged PNG ({})", name, image.message);
  return out;
}

// libjpeg reports a fatal error by calling error_exit, which must not return: it longjmps back to decode_jpeg,
// which has nothing to destroy between the setjmp and the jump (the pixel buffer lives in the caller).
struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_error_exit(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->jump, 1);
}

// Warnings (level -1) are ignored, except premature end of data: libjpeg would fill the rest with grey.
void jpeg_emit_message(j_common_ptr info, int level) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) error->truncated = true;
}

// A progressive JPEG may declare thousands of tiny scans, each a full pass over the coefficients: stop past
// 500 (the limit libjpeg-turbo's own tools use for untrusted input).
void jpeg_progress(j_common_ptr info) {
  auto* decompress = reinterpret_cast<j_decompress_ptr>(info);
  if (decompress->input_scan_number > 500) {
    auto* error = reinterpret_cast<JpegError*>(info->err);
    std::snprintf(error->message, sizeof error->message, "more than 500 scans");
    std::longjmp(error->jump, 1);
  }
}

struct JpegHeader {
  std::int64_t width = 0, height = 0;
};

// Returns "" on success, else the library's message. Decodes into `pixels`, sized through `allocate` once the
// header is known (which may throw a limit error: then nothing has started yet).
// Note: only trivially destructible objects live in this frame, so the longjmp skips no destructor.
const char* decode_jpeg_raw(const std::uint8_t* bytes, std::size_t size, int channels, JpegError& error,
                            jpeg_decompress_struct& info, std::vector<std::uint8_t>* pixels, JpegHeader* header,
                            const ImageLimits* limits, bool* limit_failed) {
  info.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = jpeg_error_exit;
  error.manager.emit_message = jpeg_emit_message;
  error.truncated = false;
  error.message[0] = '\0';
  jpeg_progress_mgr progress{};
  progress.progress_monitor = jpeg_progress;
  if (setjmp(error.jump)) return error.message;
  jpeg_create_decompress(&info);
  info.progress = &progress;
  jpeg_mem_src(&info, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  header->width = info.image_width;
  header->height = info.image_height;
  if (header->width <= 0 || header->height <= 0 || header->width > limits->max_side ||
      header->height > limits->max_side || header->width * header->height > limits->max_pixels) {
    *limit_failed = true;
    return "";
  }
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  const std::size_t stride = static_cast<std::size_t>(info.output_width) * static_cast<std::size_t>(channels);
  pixels->resize(stride * info.output_height);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = pixels->data() + stride * info.output_scanline;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  return nullptr;
}

Image decode_jpeg(const std::uint8_t* bytes, std::size_t size, int channels, const std::string& name,
                  const ImageLimits& limits) {
  JpegError error;
  jpeg_decompress_struct info;
  std::memset(&info, 0, sizeof info);
  Image out;
  JpegHeader header;
  bool limit_failed = false;
  const char* message =
      decode_jpeg_raw(bytes, size, channels, error, info, &out.pixels, &header, &limits, &limit_failed);
  const bool truncated = error.truncated;
  jpeg_destroy_decompress(&info);
  if (limit_failed) check_size(header.width, header.height, name, "JPEG", limits);
  if (message) fail("decode_image: {}: damaged JPEG ({})", name, message);
  if (truncated) fail("decode_image: {}: truncated JPEG (premature end of data)", name);
  out.height = header.height;
  out.width = header.width;
  out.channels = channels;
  return out;
}

}  // namespace

Image decode_image(const std::uint8_t* bytes, std::size_t size, int channels, const std::string& name,
                   const ImageLimits& limits) {
  if (channels != 1 && channels != 3) fail("decode_image: {}: channels must be 1 or 3, got {}", name, channels);
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(bytes, kPng, 8) == 0) return decode_png(bytes, size, channels, name, limits);
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return decode_jpeg(bytes, size, channels, name, limits);
  fail("decode_image: {}: neither PNG nor JPEG (the first bytes are not a PNG signature or a JPEG SOI marker)", name);
}

Image read_image(const std::string& path, int channels, const ImageLimits& limits) {
  // Note: a FIFO or device would block or never end: only regular files are read.
  std::error_code status_error;
  if (std::filesystem::exists(path, status_error) && !std::filesystem::is_regular_file(path, status_error))
    fail("read_image: {}: not a regular file", path);
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("read_image: cannot open {}: {}", path, std::generic_category().message(errno));
  file.seekg(0, std::ios::end);
  const std::streamoff size = file.tellg();
  if (size < 0) fail("read_image: {}: cannot tell its size (not a regular file?)", path);
  if (size > limits.max_file_bytes)
    fail("read_image: {}: {} bytes is over the limit of {} (ImageLimits::max_file_bytes)", path, size,
         limits.max_file_bytes);
  file.seekg(0, std::ios::beg);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size > 0 && !file.read(reinterpret_cast<char*>(bytes.data()), size))
    fail("read_image: {}: read failed after {} of {} bytes", path, file.gcount(), size);
  return decode_image(bytes.data(), bytes.size(), channels, path, limits);
}

}  // namespace tapegrad::data
