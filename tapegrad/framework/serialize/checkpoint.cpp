// The checkpoint file: one text header line, then the payload, a Boost.Serialization archive (binary or text)
// written and read by checkpoint_archive.cpp. This file holds the header line and the flow around the archive:
// measuring, checksumming, snapshotting for saves that read the data twice, and the checks of a read.
//
// Layout:  TAPEGRAD <format> <binary|text> f4d8i8 le <payload bytes> <payload crc32>\n<payload>
// Robustness: the whole file is mapped (or a stream read) into memory and parsed from there. The header carries
// a CRC-32 of the whole payload (so corruption anywhere is caught), every entry one of its own (so corruption
// names the entry).
#include <tapegrad/framework/serialize/checkpoint.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <sstream>
#include <string_view>
#include <unistd.h>

#include <tapegrad/framework/autograd/grad_mode.h>
#include <tapegrad/framework/serialize/detail/checkpoint_format.h>
#include <tapegrad/framework/serialize/detail/payload_sink.h>

namespace tapegrad {

using serialize_detail::encode_payload;
using serialize_detail::PayloadSink;

// ---- writing ----
namespace {

std::string header_line(ArchiveKind kind, std::uint64_t payload_bytes, std::uint32_t payload_crc) {
  return fmt::format("TAPEGRAD {} {} f4d8i8 le {} {:08x}\n", kCheckpointFormatVersion,
                     kind == ArchiveKind::Binary ? "binary" : "text", payload_bytes, payload_crc);
}

// A copy whose tensors no other thread can change, for the saves that must read the data twice.
Checkpoint snapshot(const Checkpoint& checkpoint) {
  NoGradGuard no_grad;
  Checkpoint copy = checkpoint;
  for (auto* entries : {&copy.model, &copy.optimizer, &copy.scheduler})
    for (CheckpointEntry& entry : *entries) entry.value = entry.value.detach().clone();
  return copy;
}

// Measures (size and checksum), writes the header line, then the payload: for data that cannot change.
template <class WriteHeader>
bool write_in_two_passes(const Checkpoint& stable, ArchiveKind kind, WriteHeader&& write_header,
                         PayloadSink& destination) {
  PayloadSink measure(PayloadSink::Mode::Checksum);
  encode_payload(stable, kind, measure);
  measure.finish();
  if (!write_header(header_line(kind, measure.bytes(), measure.crc()))) return false;
  if (!encode_payload(stable, kind, destination) || !destination.finish()) return false;
  if (destination.bytes() != measure.bytes() || destination.crc() != measure.crc())
    fail("save_checkpoint: the payload came out {} bytes long, then {}", measure.bytes(), destination.bytes());
  return true;
}

}  // namespace

namespace serialize_detail {

void check_savable(const Checkpoint& checkpoint, const char* op) {
  for (const auto* entries : {&checkpoint.model, &checkpoint.optimizer, &checkpoint.scheduler})
    for (const CheckpointEntry& entry : *entries)
      if (!entry.value.defined()) fail("{}: entry '{}' is an undefined tensor; there is nothing to save", op, entry.name);
}

bool write_checkpoint_file(const Checkpoint& checkpoint, ArchiveKind kind, std::FILE* file) {
  const auto write_header = [&](const std::string& header) {
    return std::fwrite(header.data(), 1, header.size(), file) == header.size();
  };
  if (kind == ArchiveKind::Text) {  // a text payload's size depends on the values: measure a snapshot
    const Checkpoint stable = snapshot(checkpoint);
    PayloadSink sink(PayloadSink::Mode::Checksum, file);
    return write_in_two_passes(stable, kind, write_header, sink);
  }
  // Note: a binary payload's size depends only on names and shapes, so a measuring pass that never reads the
  // data gives it. The data is then read once, as it is written, and the header's checksum is filled in last.
  PayloadSink measure(PayloadSink::Mode::Count);
  encode_payload(checkpoint, kind, measure);
  if (!write_header(header_line(kind, measure.bytes(), 0))) return false;
  PayloadSink sink(PayloadSink::Mode::Checksum, file);
  if (!encode_payload(checkpoint, kind, sink) || !sink.finish()) return false;
  if (sink.bytes() != measure.bytes())
    fail("save: the payload came out {} bytes long, then {} (an entry changed shape during the save)", measure.bytes(),
         sink.bytes());
  const std::string header = header_line(kind, sink.bytes(), sink.crc());
  return std::fflush(file) == 0 &&
         ::pwrite(::fileno(file), header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
}

}  // namespace serialize_detail

void save_checkpoint(const Checkpoint& checkpoint, std::ostream& out, ArchiveKind kind) {
  serialize_detail::check_savable(checkpoint, "save_checkpoint");
  PayloadSink sink(PayloadSink::Mode::Checksum, nullptr, &out);
  bool written = false;
  try {
    // Note: a stream cannot be rewritten at its start, so its payload is measured first, on a snapshot.
    written = write_in_two_passes(
        snapshot(checkpoint), kind,
        [&](const std::string& header) {
          return static_cast<bool>(out.write(header.data(), static_cast<std::streamsize>(header.size())));
        },
        sink);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("save_checkpoint: writing to the stream failed: {}", e.what());
  }
  if (!written || !out) fail("save_checkpoint: writing to the stream failed");
}

// ---- reading ----

namespace serialize_detail {

CheckpointHeader parse_header(std::string_view bytes, std::size_t& header_length, const std::string& source) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "TAPEGRAD") != 0)
    fail("{}: not a tapegrad checkpoint (the file does not start with TAPEGRAD)", source);
  const std::size_t newline = bytes.find('\n');
  if (newline == std::string::npos || newline > kMaxHeaderBytes)
    fail("{}: truncated or corrupt checkpoint header", source);
  header_length = newline + 1;
  std::istringstream line(std::string(bytes.substr(8, newline - 8)));
  CheckpointHeader header;
  std::string kind, sizes, endian, crc_text;
  line >> header.format_version >> kind >> sizes >> endian >> header.payload_bytes >> crc_text;
  if (line.fail()) fail("{}: corrupt checkpoint header", source);
  if (header.format_version == 0) fail("{}: corrupt checkpoint header (format version 0)", source);
  if (header.format_version > kCheckpointFormatVersion)
    fail("{}: written by a newer tapegrad (file format version {}; this build reads up to {})", source,
         header.format_version, kCheckpointFormatVersion);
  if (kind == "binary")
    header.kind = ArchiveKind::Binary;
  else if (kind == "text")
    header.kind = ArchiveKind::Text;
  else
    fail("{}: corrupt checkpoint header (unknown archive kind '{}')", source, kind);
  // Note: float, double and int64 are 4, 8 and 8 bytes on every platform tapegrad builds on, so the only
  // genuine other architecture a file can come from is a big-endian one; any other value is damage.
  if (sizes != "f4d8i8" || (endian != "le" && endian != "be"))
    fail("{}: corrupt checkpoint header (type sizes '{} {}')", source, sizes, endian);
  if (header.kind == ArchiveKind::Binary && endian != "le")
    fail("{}: binary checkpoint from a big-endian architecture; save it as text there", source);
  char* end = nullptr;
  const unsigned long crc = std::strtoul(crc_text.c_str(), &end, 16);
  if (crc_text.size() != 8 || end != crc_text.c_str() + 8) fail("{}: corrupt checkpoint header (checksum field)", source);
  header.payload_crc32 = static_cast<std::uint32_t>(crc);
  // Note: the line must be exactly what this build would write for these values, so that no damaged
  // header (a changed letter case, extra white space) is accepted.
  const std::string canonical = fmt::format("TAPEGRAD {} {} {} {} {} {:08x}", header.format_version, kind, sizes, endian,
                                            header.payload_bytes, header.payload_crc32);
  if (bytes.compare(0, newline, canonical) != 0 || endian != "le") fail("{}: corrupt checkpoint header", source);
  return header;
}

Checkpoint decode(std::string_view bytes, const std::string& source) {
  std::size_t header_length = 0;
  const CheckpointHeader header = parse_header(bytes, header_length, source);
  const std::size_t available = bytes.size() - header_length;
  const char* data = bytes.data() + header_length;
  const bool payload_intact =
      available == header.payload_bytes && crc32_of(data, available) == header.payload_crc32;
  const std::string truncation =
      available < header.payload_bytes
          ? fmt::format(" (truncated: the header promises {} payload bytes, the file has {})", header.payload_bytes,
                        available)
          : std::string();
  Checkpoint checkpoint =
      decode_payload(data, std::min<std::uint64_t>(available, header.payload_bytes), header.kind,
                     /*verify_entries=*/!payload_intact, source, truncation);
  if (!truncation.empty()) fail("{}: checkpoint is incomplete{}", source, truncation);
  if (available > header.payload_bytes)
    fail("{}: {} unexpected bytes after the checkpoint payload", source, available - header.payload_bytes);
  if (!payload_intact) fail("{}: checkpoint is corrupt (payload checksum mismatch)", source);
  return checkpoint;
}

}  // namespace serialize_detail

namespace {

// Reads the rest of the stream: in one read when it can tell its size, else through a buffer.
std::string read_all(std::istream& in) {
  const std::istream::pos_type start = in.tellg();
  if (start != std::istream::pos_type(-1) && in.seekg(0, std::ios::end)) {
    const std::istream::pos_type end = in.tellg();
    in.seekg(start);
    if (end != std::istream::pos_type(-1) && end >= start && in) {
      std::string bytes(static_cast<std::size_t>(end - start), '\0');
      in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      bytes.resize(static_cast<std::size_t>(in.gcount()));
      return bytes;
    }
  }
  in.clear();
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

Checkpoint load_checkpoint(std::istream& in, const std::string& source_name) {
  return serialize_detail::decode(read_all(in), source_name);
}

}  // namespace tapegrad
