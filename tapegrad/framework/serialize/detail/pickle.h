#pragma once
// Internal: the whitelisted pickle interpreter behind read_pytorch (framework/serialize/pickle_reader.cpp).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tapegrad/framework/serialize/detail/foreign.h>

namespace tapegrad::pickle {

/// What a value on the unpickler's stack is. Only what torch.save's state dicts contain exists here.
enum class Kind : std::uint8_t { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, Tensor };

/// One value. Note: every Object lives in the Unpickled arena and refers to others by plain pointer, so a hostile
/// pickle that builds a cycle (a dict holding itself) or a million-deep tuple cannot leak or overflow the stack
/// when it is destroyed.
struct Object {
  Kind kind = Kind::None;
  std::int64_t integer = 0;  // Int, Bool (0 or 1)
  double real = 0;           // Float
  std::string text;          // String; Global: "module.name"; Storage: its key
  std::vector<Object*> items;                        // Tuple, List
  std::vector<std::pair<Object*, Object*>> entries;  // Dict, in insertion order
  // Storage: element type and element count from torch's persistent id.
  foreign::Element element = foreign::Element::Float32;
  std::int64_t numel = 0;
  // Tensor: a strided view of `storage`.
  Object* storage = nullptr;
  std::int64_t offset = 0;
  Shape shape, strides;
};

/// The result of unpickling: the top-level value and the arena that owns every value.
struct Unpickled {
  std::vector<std::unique_ptr<Object>> arena;
  Object* root = nullptr;
};

/// Runs the opcodes torch.save writes (protocols 2 to 5), executing nothing: the only callables are
/// collections.OrderedDict, torch._utils._rebuild_tensor_v2 and torch._utils._rebuild_parameter, the only
/// other globals torch's storage types, and persistent ids must be torch's ('storage', type, key, location,
/// numel). Anything else is a tapegrad::Error naming the opcode or global and its byte offset in `source`.
Unpickled unpickle(std::string_view bytes, const std::string& source);

}  // namespace tapegrad::pickle
