#pragma once
/// Model state in PyTorch's formats: torch.save state dicts (zip) and safetensors, read and written.
#include <tapegrad/export.h>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

// Note: both formats hold exactly the keys PyTorch's own model of the same architecture has. The buffers only
// tapegrad has (BatchNorm's `frozen`, Dropout's random-stream counters) are left out on saving, and their absence is
// not an error on loading: they keep the module's current values. Each tensor is converted to the dtype of the
// module's entry, as PyTorch's load_state_dict does (float16 and bfloat16 files load into float32 models).
// A failed load leaves the module unchanged (Module::load_state checks everything before copying).

/// One tensor as a foreign file holds it: its name, its element type there ("float16", "int64", ...) and its
/// values, widened to float32 (float16 and float32), float64 or int64 (integers and bool); bfloat16 stays bfloat16,
/// bit for bit.
struct ForeignTensor {
  std::string name;
  std::string stored_dtype;
  Tensor value;
};

/// The file formats load(module, path) tells apart by their first bytes. PyTorchLegacy is torch.save's format
/// before PyTorch 1.6 (a bare pickle), which tapegrad does not read: every reader refuses it by that name.
enum class StateFormat : std::uint8_t { Checkpoint, PyTorch, Safetensors, Unknown, PyTorchLegacy };

/// Recognises a format from a file's first bytes (16 are enough): "TAPEGRAD", a zip's "PK\3\4", a pickle's
/// 0x80 0x02..0x05 (legacy torch.save), or an 8-byte little-endian length followed by '{'.
StateFormat sniff_state_format(std::string_view first_bytes);
/// The same, reading the first bytes of a file; Unknown for a file too short to tell.
StateFormat sniff_state_format_of_file(const std::string& path);

/// Parses a torch.save zip (PyTorch >= 1.6) holding a dict of tensors; errors name `source` and what is wrong.
std::vector<ForeignTensor> read_pytorch(std::string_view bytes, const std::string& source);
/// Parses a safetensors file; errors name `source`, the key, offsets and shape.
std::vector<ForeignTensor> read_safetensors(std::string_view bytes, const std::string& source);

/// Loads a file written by torch.save(model.state_dict(), path) into `module`.
nn::LoadResult load_pytorch(nn::Module& module, const std::string& path, bool strict = true);
/// Writes `module`'s PyTorch-visible state as torch.save(state_dict) does (STORED entries, 64-byte aligned data).
void save_pytorch(const nn::Module& module, const std::string& path);
/// Loads a safetensors file into `module`.
nn::LoadResult load_safetensors(nn::Module& module, const std::string& path, bool strict = true);
/// Writes `module`'s PyTorch-visible state as safetensors.
void save_safetensors(const nn::Module& module, const std::string& path);

/// module.state() without the tapegrad-only buffers: what PyTorch's own model of this architecture holds.
nn::NamedTensors pytorch_state(const nn::Module& module);
/// Copies foreign tensors into `module` with the conversions and tolerances above; errors are prefixed by `source`.
nn::LoadResult load_foreign_state(nn::Module& module, const std::vector<ForeignTensor>& tensors, bool strict,
                                  const std::string& source);

}  // namespace tapegrad

TAPEGRAD_API_END
