#include <tapegrad/framework/serialize/detail/payload_sink.h>

#include <algorithm>
#include <cstring>

namespace tapegrad::serialize_detail {

std::uint32_t crc32_of(const void* data, std::size_t bytes, std::uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes 32-bit lengths
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

// Note: checksums the buffered copy and writes that same copy out, so the two cannot disagree.
bool PayloadSink::flush_buffer() {
  if (mode_ == Mode::Count) return ok_;
  const auto pending = static_cast<std::size_t>(pptr() - pbase());
  if (pending > 0) {
    if (window_) {
      window_crc_ = crc32_of(pbase(), pending, window_crc_);
      window_bytes_ += pending;
    } else {
      crc_ = crc32_of(pbase(), pending, crc_);
    }
    bytes_ += pending;
    if (file_ && std::fwrite(pbase(), 1, pending, file_) != pending) ok_ = false;
    if (stream_ && !stream_->write(pbase(), static_cast<std::streamsize>(pending))) ok_ = false;
  }
  if (buffer_) setp(buffer_.get(), buffer_.get() + kBufferBytes);  // Count mode has no buffer
  return ok_;
}

}  // namespace tapegrad::serialize_detail
