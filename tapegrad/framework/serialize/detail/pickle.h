#pragma once
// Internal: the whitelisted pickle interpreter behind read_pytorch (framework/serialize/pickle_reader.cpp).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tapegrad/framework/serialize/detail/foreign.h>

namespace tapegrad::pickle {

/// What a value on the unpickler's stack is. Only what torch.save's state dicts contain exists here.
enum class Kind : std::uint8_t { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, Tensor };

struct Object;

/// What _rebuild_tensor_v2 made: a strided view of a storage.
struct TensorView {
  Object* storage = nullptr;
  std::int64_t offset = 0;
  Shape shape, strides;
};

/// One value. Note: every Object lives in the Unpickled arena and refers to others by plain pointer, so a hostile
/// pickle that builds a cycle (a dict holding itself) or a million-deep tuple cannot leak or overflow the stack
/// when it is destroyed. Kept small (about 100 bytes): a pickle may create one per byte, up to kMaxObjects.
struct Object {
  Kind kind = Kind::None;
  foreign::Element element = foreign::Element::Float32;  // Storage: element type from torch's persistent id
  std::int64_t integer = 0;  // Int, Bool (0 or 1); Storage: element count from torch's persistent id
  double real = 0;           // Float
  std::string text;          // String; Global: "module.name"; Storage: its key
  std::vector<Object*> items;                        // Tuple, List
  std::vector<std::pair<Object*, Object*>> entries;  // Dict, in insertion order
  std::unique_ptr<TensorView> tensor;                // Tensor
};

/// The limits the interpreter holds every pickle to, so that time and memory stay linear in its bytes and
/// bounded in absolute terms. A torch.save state dict of N tensors creates about 20 N objects, keeps a stack of
/// at most ~2,000 values (the pickler batches SETITEMS by 1,000) and memoizes each object once.
inline constexpr std::size_t kMaxObjects = std::size_t{1} << 21;    // 2,097,152 values (~200 MB at most)
inline constexpr std::size_t kMaxStack = 100'000;                   // values on the stack at once
inline constexpr std::size_t kMaxSlots = std::size_t{1} << 23;      // tuple, list and dict slots in all
inline constexpr std::size_t kMaxMemo = kMaxObjects;                // memo entries

/// The result of unpickling: the top-level value and the arena that owns every value.
struct Unpickled {
  std::deque<Object> arena;  // a deque: objects never move, and there is no allocation per object
  Object* root = nullptr;
};

/// Runs the opcodes torch.save writes (protocols 2 to 5), executing nothing: the only callables are
/// collections.OrderedDict, torch._utils._rebuild_tensor_v2 and torch._utils._rebuild_parameter, the only
/// other globals torch's storage types, and persistent ids must be torch's ('storage', type, key, location,
/// numel). Anything else is a tapegrad::Error naming the opcode or global and its byte offset in `source`.
Unpickled unpickle(std::string_view bytes, const std::string& source);

}  // namespace tapegrad::pickle
