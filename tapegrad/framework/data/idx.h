#pragma once
/// Readers for IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::data {

/// Where Debian's `dataset-fashion-mnist` package puts the four Fashion-MNIST files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
/// The environment variable that overrides kDefaultFashionMnistDir.
inline constexpr const char* kFashionMnistDirEnv = "TAPEGRAD_FASHION_MNIST";

/// The Fashion-MNIST directory: `explicit_dir` when non-empty, else $TAPEGRAD_FASHION_MNIST when set and
/// non-empty, else kDefaultFashionMnistDir.
std::string fashion_mnist_dir(const std::string& explicit_dir = "");

/// Reads an IDX3 image file (magic 0x00000803, unsigned bytes) into a float32 tensor [N, 1, rows, cols].
/// Pixels are scaled to [0, 1] when `scale_to_unit`, else kept as raw values 0..255.
/// Note: the file may be gzip-compressed or plain; it is recognised by its first bytes, not its name.
/// Wrong magic, bad dims, a truncated or oversized payload, a missing or non-regular file (a FIFO never blocks
/// it) and damaged gzip data throw tapegrad::Error naming the file. The header is checked first, and the file
/// against what it promises, before anything is allocated; gzip data is never inflated past the payload.
Tensor read_idx_images(const std::string& path, bool scale_to_unit = true);

/// Reads an IDX1 label file (magic 0x00000801, unsigned bytes) into an int64 tensor [N].
Tensor read_idx_labels(const std::string& path);

}  // namespace tapegrad::data

TAPEGRAD_API_END
