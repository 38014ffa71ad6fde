#pragma once
// Internal: what the PyTorch and safetensors readers and writers share (element types, widening, whole-file I/O).
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <tapegrad/framework/module.h>
#include <tapegrad/framework/tensor.h>

namespace tapegrad::foreign {

/// The element types the two formats can hold that tapegrad reads.
enum class Element : std::uint8_t { Float16, BFloat16, Float32, Float64, Int64, Int32, Int16, Int8, UInt8, Bool };

/// Bytes per element.
std::size_t element_bytes(Element element);
/// "float16", "bfloat16", ... (torch's own names, without "torch.").
const char* element_name(Element element);
/// The tapegrad dtype an element is widened to on reading: Float32 for 16- and 32-bit floats, Float64, else Int64.
DType widened_dtype(Element element);
/// The element that holds a tapegrad dtype exactly.
Element element_of(DType dtype);

/// Decodes `numel` little-endian elements starting at `bytes` into a new tensor of widened_dtype(element),
/// taking element i from bytes + (offset + index(i)) * element_bytes, where index walks `shape` with `strides`.
/// The caller has checked that every index stays inside the bytes it holds.
Tensor decode_strided(const char* bytes, Element element, const Shape& shape, const Shape& strides,
                      std::int64_t offset);

/// Decodes `count` little-endian elements at `bytes` into the contiguous tensor `out` (of widened_dtype(element)),
/// from its element `at` on: the piece-by-piece form of decode_strided, for data read in chunks.
void decode_contiguous(const char* bytes, Element element, std::int64_t count, Tensor& out, std::int64_t at);

/// The whole file; errors name `what` ("load_pytorch") and the path.
std::string read_whole_file(const std::string& path, const char* what);
/// Writes through `write(FILE*)` into a temporary file next to `path`, then renames it over `path`, so a failed
/// save never destroys an existing file. `write` returns false on a failed write.
void write_file_atomically(const std::string& path, const char* what, const std::function<bool(std::FILE*)>& write);

/// load_pytorch or load_safetensors when the file's first bytes say it is one of those; nullopt otherwise (then
/// load(module, path) reads it as a tapegrad checkpoint).
std::optional<nn::LoadResult> load_if_foreign(nn::Module& module, const std::string& path, bool strict);

}  // namespace tapegrad::foreign
