// A pickle interpreter for torch.save's data.pkl that executes nothing: a fixed set of opcodes, three known
// callables and torch's storage types. Python's own pickle would import and call whatever the file names.
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/serialize/detail/pickle.h>

namespace tapegrad::pickle {
namespace {

// torch's state dicts open at most three MARKs at once (dict items, rebuild arguments, persistent id).
constexpr std::size_t kMaxMarks = 64;

struct StorageType {
  const char* name;
  foreign::Element element;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", foreign::Element::Float32},   {"torch.DoubleStorage", foreign::Element::Float64},
    {"torch.HalfStorage", foreign::Element::Float16},    {"torch.BFloat16Storage", foreign::Element::BFloat16},
    {"torch.LongStorage", foreign::Element::Int64},      {"torch.IntStorage", foreign::Element::Int32},
    {"torch.ShortStorage", foreign::Element::Int16},     {"torch.CharStorage", foreign::Element::Int8},
    {"torch.ByteStorage", foreign::Element::UInt8},      {"torch.BoolStorage", foreign::Element::Bool}};

constexpr const char* kCallables[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                      "torch._utils._rebuild_parameter"};

// A dict's string key, for the hash index that makes SETITEM O(1): which dict, and the key's text.
struct DictKey {
  const Object* dict;
  std::string_view text;
  bool operator==(const DictKey&) const = default;
};
struct DictKeyHash {
  std::size_t operator()(const DictKey& k) const {
    return std::hash<std::string_view>()(k.text) ^ (std::hash<const void*>()(k.dict) * 0x9e3779b97f4a7c15ull);
  }
};

class Machine {
 public:
  Machine(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {
    // Note: None, True and False are shared: a pickle of nothing but those opcodes allocates no values.
    none_ = make(Kind::None);
    true_ = make_int(1, Kind::Bool);
    false_ = make_int(0, Kind::Bool);
  }

  Unpickled run() {
    while (true) {
      opcode_at_ = at_;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: {  // PROTO
          const auto version = static_cast<unsigned char>(take(1)[0]);
          if (version < 2 || version > 5) error("pickle protocol {} (torch.save writes 2)", version);
          break;
        }
        case 0x95: take(8); break;  // FRAME: a length hint only
        case '.': {                 // STOP
          if (stack_.empty()) error("STOP with an empty stack");
          out_.root = stack_.back();
          return std::move(out_);
        }
        case '(': {  // MARK
          if (marks_.size() >= kMaxMarks) error("more than {} nested MARKs", kMaxMarks);
          marks_.push_back(stack_.size());
          break;
        }
        case 'N': push(none_); break;
        case 0x88: push(true_); break;   // NEWTRUE
        case 0x89: push(false_); break;  // NEWFALSE
        case 'K': push(make_int(static_cast<unsigned char>(take(1)[0]))); break;  // BININT1
        case 'M': push(make_int(little<std::uint16_t>(take(2)))); break;         // BININT2
        case 'J': push(make_int(little<std::int32_t>(take(4)))); break;          // BININT
        case 0x8a: push(make_int(long1())); break;                               // LONG1
        case 'G': {  // BINFLOAT: big-endian double
          const std::string_view b = take(8);
          std::uint64_t bits = 0;
          for (const char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);
          Object* f = make(Kind::Float);
          std::memcpy(&f->real, &bits, sizeof bits);
          push(f);
          break;
        }
        case 'X': push(make_string(take(little<std::uint32_t>(take(4))))); break;           // BINUNICODE
        case 0x8c: push(make_string(take(static_cast<unsigned char>(take(1)[0])))); break;  // SHORT_BINUNICODE
        case 'c': {  // GLOBAL "module\nname\n"
          const std::string module(line());
          push(make_global(module + "." + std::string(line())));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Object* name = pop(Kind::String, "STACK_GLOBAL name");
          Object* module = pop(Kind::String, "STACK_GLOBAL module");
          push(make_global(module->text + "." + name->text));
          break;
        }
        case ')': push(make(Kind::Tuple)); break;  // EMPTY_TUPLE
        case 0x85: tuple_of(1); break;             // TUPLE1
        case 0x86: tuple_of(2); break;             // TUPLE2
        case 0x87: tuple_of(3); break;             // TUPLE3
        case 't': {                                // TUPLE
          const std::size_t mark = pop_mark();
          tuple_of(stack_.size() - mark);
          break;
        }
        case ']': push(make(Kind::List)); break;  // EMPTY_LIST
        case 'a': {                               // APPEND
          Object* value = pop();
          Object* list = top(Kind::List, "APPEND");
          use_slots(1);
          list->items.push_back(value);
          break;
        }
        case 'e': {  // APPENDS
          const std::size_t mark = pop_mark();
          Object* list = below(mark, Kind::List, "APPENDS");
          use_slots(stack_.size() - mark);
          list->items.insert(list->items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
          stack_.resize(mark);
          break;
        }
        case '}': push(make(Kind::Dict)); break;  // EMPTY_DICT
        case 's': {                               // SETITEM
          Object* value = pop();
          Object* key = pop();
          set_item(top(Kind::Dict, "SETITEM"), key, value);
          break;
        }
        case 'u': {  // SETITEMS
          const std::size_t mark = pop_mark();
          if ((stack_.size() - mark) % 2 != 0) error("SETITEMS with an odd number of values");
          Object* dict = below(mark, Kind::Dict, "SETITEMS");
          for (std::size_t i = mark; i < stack_.size(); i += 2) set_item(dict, stack_[i], stack_[i + 1]);
          stack_.resize(mark);
          break;
        }
        case 'q': memo_put(static_cast<unsigned char>(take(1)[0])); break;  // BINPUT
        case 'r': memo_put(little<std::uint32_t>(take(4))); break;          // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;                           // MEMOIZE
        case 'h': memo_get(static_cast<unsigned char>(take(1)[0])); break;  // BINGET
        case 'j': memo_get(little<std::uint32_t>(take(4))); break;          // LONG_BINGET
        case 'Q': push(persistent(pop())); break;                           // BINPERSID
        case 'R': {                                                         // REDUCE
          Object* args = pop(Kind::Tuple, "REDUCE arguments");
          Object* callable = pop(Kind::Global, "REDUCE callable");
          push(call(callable->text, *args));
          break;
        }
        case 'b': {  // BUILD: only a state dict's `_metadata` (module versions), which tapegrad does not need
          if (pop()->kind != Kind::Dict) error("BUILD with a state that is not a dict");
          top(Kind::Dict, "BUILD");
          break;
        }
        default:
          error("opcode 0x{:02x} ('{}') is not one torch.save writes", op,
                op >= 0x20 && op < 0x7f && op != '\\' ? static_cast<char>(op) : '?');
      }
    }
  }

 private:
  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: data.pkl at byte {}: {}", source_, opcode_at_, fmt::format(format, std::forward<Args>(args)...));
  }

  std::string_view take(std::uint64_t n) {
    if (n > bytes_.size() - at_) error("truncated (needs {} more bytes, {} left)", n, bytes_.size() - at_);
    const std::string_view out = bytes_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return out;
  }
  template <class T>
  static T little(std::string_view b) {
    T value;
    std::memcpy(&value, b.data(), sizeof value);
    return value;
  }
  std::string_view line() {
    const std::size_t end = bytes_.find('\n', at_);
    if (end == std::string_view::npos || end - at_ > 256) error("GLOBAL name without a newline");
    const std::size_t length = end - at_;
    return take(length + 1).substr(0, length);
  }
  std::int64_t long1() {
    const auto n = static_cast<unsigned char>(take(1)[0]);
    if (n > 8) error("LONG1 of {} bytes (tapegrad reads up to 8)", n);
    const std::string_view b = take(n);
    std::uint64_t value = 0;
    for (std::size_t i = n; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(b[i]);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(b[n - 1]) & 0x80)) value |= ~std::uint64_t{0} << (8 * n);
    return static_cast<std::int64_t>(value);
  }

  Object* make(Kind kind) {
    if (out_.arena.size() >= kMaxObjects)
      error("more than {} values (a state dict of N tensors holds about 20 N)", kMaxObjects);
    Object& o = out_.arena.emplace_back();
    o.kind = kind;
    return &o;
  }
  // Every tuple, list and dict slot counts against kMaxSlots: BINGET and APPEND can fill a list with the same
  // value at two bytes a slot, so the objects' count alone does not bound the memory.
  void use_slots(std::size_t n) {
    slots_ += n;
    if (slots_ > kMaxSlots) error("more than {} tuple, list and dict slots in all", kMaxSlots);
  }
  Object* make_int(std::int64_t value, Kind kind = Kind::Int) {
    Object* o = make(kind);
    o->integer = value;
    return o;
  }
  Object* make_string(std::string_view text) {
    Object* o = make(Kind::String);
    o->text = text;
    return o;
  }
  Object* make_global(const std::string& name) {
    for (const char* callable : kCallables)
      if (name == callable) return with_text(make(Kind::Global), name);
    for (const StorageType& type : kStorageTypes)
      if (name == type.name) return with_text(make(Kind::Global), name);
    error("global '{}' is not allowed (only collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
          "torch._utils._rebuild_parameter and torch's storage types)", detail::printable(name));
  }
  static Object* with_text(Object* o, const std::string& text) {
    o->text = text;
    return o;
  }

  void push(Object* o) {
    if (stack_.size() >= kMaxStack) error("more than {} values on the stack", kMaxStack);
    stack_.push_back(o);
  }
  Object* pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) error("stack underflow");
    Object* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Object* pop(Kind kind, const char* what) {
    Object* o = pop();
    if (o->kind != kind) error("{} has the wrong type", what);
    return o;
  }
  Object* top(Kind kind, const char* what) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()) || stack_.back()->kind != kind)
      error("{} without a {} below it", what, kind == Kind::Dict ? "dict" : "list");
    return stack_.back();
  }
  std::size_t pop_mark() {
    if (marks_.empty()) error("no MARK to pop");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }
  Object* below(std::size_t mark, Kind kind, const char* what) {
    if (mark == 0 || stack_[mark - 1]->kind != kind || (!marks_.empty() && marks_.back() == mark))
      error("{} without a {} below its MARK", what, kind == Kind::Dict ? "dict" : "list");
    return stack_[mark - 1];
  }
  void tuple_of(std::size_t n) {
    if (n > stack_.size() || (!marks_.empty() && stack_.size() - n < marks_.back())) error("stack underflow");
    Object* t = make(Kind::Tuple);
    use_slots(n);
    t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    push(t);
  }
  // As Python's dict: a string key stored again replaces the value in place. The hash index keeps a dict of
  // n keys O(n) to build (a linear search per key took minutes for 200,000 keys).
  void set_item(Object* dict, Object* key, Object* value) {
    if (key->kind == Kind::String) {
      const auto [it, inserted] = dict_index_.emplace(DictKey{dict, key->text}, dict->entries.size());
      if (!inserted) {
        dict->entries[it->second].second = value;
        return;
      }
    }
    use_slots(2);
    dict->entries.emplace_back(key, value);
  }
  void memo_put(std::uint64_t index) {
    if (stack_.empty()) error("memo store with an empty stack");
    if (memo_.size() >= kMaxMemo && memo_.find(index) == memo_.end()) error("more than {} memo entries", kMaxMemo);
    memo_[index] = stack_.back();
  }
  void memo_get(std::uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) error("memo entry {} was never stored", index);
    push(it->second);
  }

  // ('storage', <storage type>, key, location, numel) -> one Storage per key, shared by every view of it.
  Object* persistent(Object* id) {
    if (id->kind != Kind::Tuple || id->items.size() != 5 || id->items[0]->kind != Kind::String ||
        id->items[0]->text != "storage" || id->items[1]->kind != Kind::Global || id->items[2]->kind != Kind::String ||
        id->items[3]->kind != Kind::String || id->items[4]->kind != Kind::Int)
      error("persistent id is not torch's ('storage', type, key, location, numel)");
    const std::string& type = id->items[1]->text;
    const std::string& key = id->items[2]->text;
    const std::int64_t numel = id->items[4]->integer;
    const StorageType* storage_type = nullptr;
    for (const StorageType& t : kStorageTypes)
      if (type == t.name) storage_type = &t;
    if (storage_type == nullptr) error("persistent id names '{}', not a storage type", detail::printable(type));
    const foreign::Element element = storage_type->element;
    if (numel < 0) error("storage '{}' has a negative size {}", detail::printable(key), numel);
    auto [it, inserted] = storages_.emplace(key, nullptr);
    if (!inserted) {
      if (it->second->element != element || it->second->integer != numel)
        error("storage '{}' appears twice with different types or sizes", detail::printable(key));
      return it->second;
    }
    Object* s = with_text(make(Kind::Storage), key);
    s->element = element;
    s->integer = numel;
    it->second = s;
    return s;
  }

  Shape ints(const Object* tuple, const char* what) {
    if (tuple->kind != Kind::Tuple) error("{} is not a tuple", what);
    if (tuple->items.size() > 64) error("{} has {} dims (at most 64)", what, tuple->items.size());
    Shape out;
    for (const Object* o : tuple->items) {
      if (o->kind != Kind::Int) error("{} holds a non-integer", what);
      out.push_back(o->integer);
    }
    return out;
  }

  Object* call(const std::string& callable, const Object& args) {
    const auto& a = args.items;
    if (callable == "collections.OrderedDict") {
      if (!a.empty()) error("OrderedDict called with arguments");
      return make(Kind::Dict);
    }
    if (callable == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (a.size() < 6 || a.size() > 7 || a[0]->kind != Kind::Storage || a[1]->kind != Kind::Int)
        error("_rebuild_tensor_v2 called with unexpected arguments");
      Object* t = make(Kind::Tensor);
      t->tensor = std::make_unique<TensorView>();
      t->tensor->storage = a[0];
      t->tensor->offset = a[1]->integer;
      t->tensor->shape = ints(a[2], "tensor size");
      t->tensor->strides = ints(a[3], "tensor stride");
      return t;
    }
    if (callable == "torch._utils._rebuild_parameter") {  // (tensor, requires_grad, backward_hooks)
      if (a.size() != 3 || a[0]->kind != Kind::Tensor) error("_rebuild_parameter called with unexpected arguments");
      return a[0];
    }
    error("'{}' is not callable", detail::printable(callable));
  }

  std::string_view bytes_;
  const std::string& source_;
  std::size_t at_ = 0;
  std::size_t opcode_at_ = 0;
  std::vector<Object*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Object*> memo_;
  std::unordered_map<std::string, Object*> storages_;
  std::unordered_map<DictKey, std::size_t, DictKeyHash> dict_index_;
  std::size_t slots_ = 0;
  Object* none_ = nullptr;
  Object* true_ = nullptr;
  Object* false_ = nullptr;
  Unpickled out_;
};

}  // namespace

Unpickled unpickle(std::string_view bytes, const std::string& source) { return Machine(bytes, source).run(); }

}  // namespace tapegrad::pickle
