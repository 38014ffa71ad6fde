#pragma once
// The stream buffer a checkpoint payload is written through: it measures, checksums and writes.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <streambuf>
#include <memory>
#include <vector>

namespace tapegrad::serialize_detail {

/// CRC-32 of `bytes` bytes, continuing from `crc` (zlib's, in chunks its 32-bit lengths can take).
std::uint32_t crc32_of(const void* data, std::size_t bytes, std::uint32_t crc = 0);

// Note: a payload is never held in memory whole. Saving runs the archive twice: first into a sink that only
// measures (the header line, which comes first, needs the payload's size), then into the destination.
// Every byte on its way out is first copied into the sink's own buffer, checksummed there and written from
// there, so what the file holds is exactly what was checksummed even while another thread changes the
// tensors (a save concurrent with training gives a torn snapshot, never a file its own checksums refuse).
class PayloadSink : public std::streambuf {
 public:
  enum class Mode { Count, Checksum };  // Count never reads the data: it only adds up sizes
  explicit PayloadSink(Mode mode, std::FILE* file = nullptr, std::ostream* stream = nullptr)
      : mode_(mode), file_(file), stream_(stream) {
    // Note: left uninitialised (new char[], not a std::vector of zeros): every byte is written before it is
    // read, and zeroing 1 MiB on every save was most of the time of saving a small module (the testing kit's
    // save/load property: 40 % memset).
    if (mode_ == Mode::Checksum) {
      buffer_.reset(new char[kBufferBytes]);
      setp(buffer_.get(), buffer_.get() + kBufferBytes);
    }
  }
  ~PayloadSink() override = default;
  /// Flushes what is buffered; false when the destination failed.
  bool finish() { return flush_buffer() && ok_; }
  bool checksums() const { return mode_ == Mode::Checksum; }
  std::uint64_t bytes() const { return bytes_ + static_cast<std::uint64_t>(pptr() - pbase()); }
  std::uint32_t crc() const { return crc_; }
  /// Starts a separate checksum for the bytes written until end_data() (one entry's tensor data).
  void begin_data() {
    flush_buffer();
    window_ = true;
    window_crc_ = 0;
    window_bytes_ = 0;
  }
  /// The checksum of the bytes written since begin_data(), as they went out.
  std::uint32_t end_data() {
    flush_buffer();
    window_ = false;
    crc_ = static_cast<std::uint32_t>(::crc32_combine(crc_, window_crc_, static_cast<z_off_t>(window_bytes_)));
    return window_crc_;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return flush_buffer() ? traits_type::not_eof(ch) : ch;
    if (mode_ == Mode::Count) {
      ++bytes_;
      return ch;
    }
    if (!flush_buffer()) return traits_type::eof();
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
    return ch;
  }
  std::streamsize xsputn(const char* data, std::streamsize count) override {
    if (mode_ == Mode::Count) {
      bytes_ += static_cast<std::uint64_t>(count);
      return count;
    }
    std::streamsize done = 0;
    while (done < count) {
      if (pptr() == epptr() && !flush_buffer()) return done;
      const std::streamsize n = std::min<std::streamsize>(count - done, epptr() - pptr());
      std::memcpy(pptr(), data + done, static_cast<std::size_t>(n));
      pbump(static_cast<int>(n));
      done += n;
    }
    return count;
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

  bool flush_buffer();
  Mode mode_;
  std::FILE* file_;
  std::ostream* stream_;
  std::unique_ptr<char[]> buffer_;
  bool ok_ = true;
  std::uint64_t bytes_ = 0;
  std::uint32_t crc_ = 0;
  bool window_ = false;
  std::uint32_t window_crc_ = 0;
  std::uint64_t window_bytes_ = 0;
};

}  // namespace tapegrad::serialize_detail
