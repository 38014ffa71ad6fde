#pragma once
// The checkpoint format's internals shared by checkpoint_archive.cpp (the payload archive), checkpoint.cpp (the
// header line and the flow around the archive) and checkpoint_file.cpp (files).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <tapegrad/framework/serialize/checkpoint.h>

namespace tapegrad::serialize_detail {

class PayloadSink;

constexpr std::uint64_t kMaxHeaderBytes = 256;

/// Parses the header line at the start of `bytes`; sets `header_length` to its length with the newline.
CheckpointHeader parse_header(std::string_view bytes, std::size_t& header_length, const std::string& source);
/// Parses a whole file's bytes; errors name `source`.
Checkpoint decode(std::string_view bytes, const std::string& source);
/// Throws naming the entry when a tensor is undefined, before anything is written.
void check_savable(const Checkpoint& checkpoint, const char* op);
/// Writes header and payload into `file` (at its start); false on a write error. Note: may rewrite the header
/// line in place once the payload's checksum is known.
bool write_checkpoint_file(const Checkpoint& checkpoint, ArchiveKind kind, std::FILE* file);

/// Writes the payload archive of `checkpoint` into `sink`; false when the sink refused a write.
bool encode_payload(const Checkpoint& checkpoint, ArchiveKind kind, PayloadSink& sink);
/// Reads the payload archive in data[0, size). Errors name `source` and the entry being read, and end with
/// `truncation` (empty unless the file is shorter than its header says). With `verify_entries` every entry's
/// checksum is checked, to name a damaged one.
Checkpoint decode_payload(const char* data, std::uint64_t size, ArchiveKind kind, bool verify_entries,
                          const std::string& source, const std::string& truncation);

}  // namespace tapegrad::serialize_detail
