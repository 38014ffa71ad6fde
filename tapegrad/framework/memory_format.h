#pragma once
/// The order a tensor's elements take in memory, as libtorch's at::MemoryFormat (see docs/channels_last.md).
#include <tapegrad/export.h>
#include <cstdint>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Contiguous: row-major (NCHW for images). ChannelsLast: a 4-d [N, C, H, W] tensor whose memory holds the dense
/// NHWC array (strides [H*W*C, 1, W*C, C]). Preserve: keep the format of the tensor it is made from (only for
/// factories such as empty_like, as in libtorch). ChannelsLast3d (5-d) is not supported.
enum class MemoryFormat : std::uint8_t { Contiguous, ChannelsLast, Preserve };

/// "Contiguous", "ChannelsLast" or "Preserve", the spelling error messages use.
constexpr const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "Contiguous";
    case MemoryFormat::ChannelsLast: return "ChannelsLast";
    case MemoryFormat::Preserve: return "Preserve";
  }
  return "?";
}

}  // namespace tapegrad

TAPEGRAD_API_END
