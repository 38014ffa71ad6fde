// The safetensors JSON header, {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {str: str}}, read as nlohmann_json's SAX events by a handler that builds the entry list as
// they arrive.
// Note: no JSON value is ever built. nlohmann's SAX parser keeps its nesting on an explicit stack (a
// std::vector<bool> in parser::sax_parse_internal), and the handler refuses to open a level past kMaxDepth, so
// neither parsing nor anything after it recurses on the file's nesting (a DOM's copy and destructor do, and
// 100,000 nested arrays overflowed the stack). Every key costs O(1) (an ordered DOM scans its keys linearly on
// each insertion, which made 200,000 keys take 41 s); duplicate names are found by one sort at the end.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/serialize/detail/safetensors_header.h>

namespace tapegrad::safetensors {
namespace {

using detail::printable;
using Json = nlohmann::json;

struct DtypeName {
  const char* code;
  foreign::Element element;
};
constexpr DtypeName kDtypes[] = {{"F16", foreign::Element::Float16}, {"BF16", foreign::Element::BFloat16},
                                 {"F32", foreign::Element::Float32}, {"F64", foreign::Element::Float64},
                                 {"I64", foreign::Element::Int64},   {"I32", foreign::Element::Int32},
                                 {"I16", foreign::Element::Int16},   {"I8", foreign::Element::Int8},
                                 {"U8", foreign::Element::UInt8},    {"BOOL", foreign::Element::Bool}};

// What a value is expected to be, by where it stands.
enum class Role : std::uint8_t {
  Header,         // the whole header: an object of tensors
  Tensor,         // a top-level value other than __metadata__
  Metadata,       // __metadata__'s value: an object of strings
  MetadataValue,  // one of those strings
  Dtype,          // a tensor's fields
  Shape,
  Offsets,
  Extent,   // an element of shape
  Offset,   // an element of data_offsets
  Ignored,  // a tensor's unknown field, and everything inside it (skipped, as the reference reader does)
};

// An open object or array: its own role, and the role of its next element (arrays) or of the value after its
// latest key (objects).
struct Frame {
  Role role;
  Role next;
};

constexpr unsigned kHasDtype = 1, kHasShape = 2, kHasOffsets = 4;

class HeaderHandler {
 public:
  explicit HeaderHandler(const std::string& source) : source_(source) { stack_.reserve(kMaxDepth); }

  std::vector<Entry> take() { return std::move(entries_); }

  // ---- nlohmann::json_sax interface ----
  bool null() { return mismatch("null"); }
  bool boolean(bool) { return mismatch("a boolean"); }
  bool number_integer(Json::number_integer_t value) {
    return mismatch(fmt::format("the negative integer {}", value));
  }
  bool number_float(Json::number_float_t, const Json::string_t& text) {
    return mismatch(fmt::format("the number {} (not an integer below 2^64)", printable(text, 32)));
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    const Role role = expected();
    if (role == Role::Extent) {
      if (entry_.shape.size() >= kMaxDims) fail("{}: shape has more than {} extents", where(), kMaxDims);
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("{}: shape extent {} is above 2^63 - 1", where(), value);
      entry_.shape.push_back(static_cast<std::int64_t>(value));
      return true;
    }
    if (role == Role::Offset) {
      if (offset_count_ >= 2) fail("{}: data_offsets holds more than two values, not [begin, end]", where());
      (offset_count_++ == 0 ? entry_.begin : entry_.end) = value;
      return true;
    }
    return mismatch("a number");
  }
  bool string(Json::string_t& value) {
    const Role role = expected();
    if (role == Role::MetadataValue) return true;  // checked, not kept
    if (role == Role::Dtype) {
      entry_.element = element_of_code(value);
      return true;
    }
    return mismatch("a string");
  }
  bool binary(Json::binary_t&) { return mismatch("binary data"); }  // JSON text has none

  bool start_object(std::size_t) {
    const Role role = enter("an object");
    switch (role) {
      case Role::Header: return push(role, Role::Tensor);
      case Role::Metadata: return push(role, Role::MetadataValue);
      case Role::Tensor:
        entry_ = Entry{};
        entry_.name = std::move(name_);
        fields_ = 0;
        offset_count_ = 0;
        return push(role, Role::Ignored);
      case Role::Ignored: return push(role, Role::Ignored);
      default: return mismatch("an object");
    }
  }
  bool start_array(std::size_t) {
    const Role role = enter("an array");
    switch (role) {
      case Role::Shape: return push(role, Role::Extent);
      case Role::Offsets: return push(role, Role::Offset);
      case Role::Ignored: return push(role, Role::Ignored);
      default: return mismatch("an array");
    }
  }
  bool key(Json::string_t& key) {
    Frame& top = stack_.back();
    switch (top.role) {
      case Role::Header:
        if (key == "__metadata__") {
          if (has_metadata_) fail("{}: __metadata__ appears twice in the JSON header", source_);
          has_metadata_ = true;
          top.next = Role::Metadata;
        } else {
          name_ = std::move(key);  // the lexer clears its buffer before the next token
          top.next = Role::Tensor;
        }
        break;
      case Role::Metadata: metadata_key_ = std::move(key); break;
      case Role::Tensor: top.next = field(key); break;
      default: break;  // Ignored: anything goes
    }
    return true;
  }
  bool end_object() {
    const Role role = stack_.back().role;
    stack_.pop_back();
    if (role == Role::Tensor) finish_entry();
    return true;
  }
  bool end_array() {
    if (stack_.back().role == Role::Offsets && offset_count_ != 2)
      fail("{}: data_offsets holds {} value{}, not [begin, end]", where(), offset_count_, offset_count_ == 1 ? "" : "s");
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& error) {
    // Note: nlohmann's message quotes the last token, which can be most of the header; it is cut and escaped.
    fail("{}: the JSON header is invalid at its byte {}: {}", source_, position, printable(error.what(), 200));
  }

 private:
  // The role of the value that starts now.
  Role expected() const { return stack_.empty() ? Role::Header : stack_.back().next; }

  // Opening an object or an array: refused past the nesting limit, before the parser goes one level deeper.
  Role enter(const char* type) {
    if (stack_.size() >= kMaxDepth)
      fail("{}: the JSON header nests deeper than {} levels ({} at depth {}{})", source_, kMaxDepth, type,
           stack_.size() + 1, in_tensor() ? fmt::format(", in tensor '{}'", printable(entry_.name)) : "");
    return expected();
  }
  bool push(Role role, Role next) {
    stack_.push_back({role, next});
    return true;
  }
  bool in_tensor() const { return stack_.size() >= 2 && stack_[1].role == Role::Tensor; }

  Role field(const std::string& key) {
    unsigned bit = 0;
    Role role = Role::Ignored;
    if (key == "dtype") {
      bit = kHasDtype, role = Role::Dtype;
    } else if (key == "shape") {
      bit = kHasShape, role = Role::Shape;
    } else if (key == "data_offsets") {
      bit = kHasOffsets, role = Role::Offsets;
    }
    if ((fields_ & bit) != 0) fail("{}: field '{}' appears twice", where(), key);
    fields_ |= bit;
    return role;
  }

  // A value whose JSON type does not fit where it stands. `type` is the library's own words, never file bytes
  // beyond an escaped, cut number.
  bool mismatch(const std::string& type) {
    switch (expected()) {
      case Role::Ignored: return true;
      case Role::MetadataValue:
        fail("{}: __metadata__ '{}' is {}, not a string", source_, printable(metadata_key_), type);
      case Role::Header: fail("{}: the JSON header is {}, not an object", source_, type);
      case Role::Tensor:
        fail("{}: tensor '{}' is {}, not an object with dtype, shape and data_offsets", source_, printable(name_),
             type);
      case Role::Metadata: fail("{}: __metadata__ is {}, not an object of strings", source_, type);
      case Role::Dtype: fail("{}: dtype is {}, not a string", where(), type);
      case Role::Shape: fail("{}: shape is {}, not an array of non-negative integers", where(), type);
      case Role::Offsets: fail("{}: data_offsets is {}, not [begin, end]", where(), type);
      case Role::Extent: fail("{}: shape holds {}, not a non-negative integer", where(), type);
      case Role::Offset: fail("{}: data_offsets holds {}, not a non-negative integer", where(), type);
    }
    return false;
  }

  foreign::Element element_of_code(const std::string& code) const {
    for (const DtypeName& d : kDtypes)
      if (code == d.code) return d.element;
    fail("{}: dtype '{}' is not one tapegrad reads (F16, BF16, F32, F64, I64, I32, I16, I8, U8, BOOL)", where(),
         printable(code, 32));
  }

  void finish_entry() {
    if (fields_ != (kHasDtype | kHasShape | kHasOffsets))
      fail("{}: needs an object with dtype, shape and data_offsets (lacks{}{}{})", where(),
           (fields_ & kHasDtype) ? "" : " dtype", (fields_ & kHasShape) ? "" : " shape",
           (fields_ & kHasOffsets) ? "" : " data_offsets");
    // Note: the product of the non-zero extents must fit too, so that no stride of an empty tensor overflows.
    std::uint64_t bytes = foreign::element_bytes(entry_.element);
    bool empty = false;
    for (const std::int64_t extent : entry_.shape) {
      empty = empty || extent == 0;
      if (extent != 0 && __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(extent), &bytes))
        fail("{}: shape {} of {} needs more bytes than a 64-bit count holds (overflow)", where(),
             shape_string(entry_.shape), code_of(entry_.element));
    }
    if (empty) bytes = 0;
    if (entry_.end < entry_.begin || entry_.end - entry_.begin != bytes)
      fail("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where(), entry_.begin, entry_.end,
           entry_.end < entry_.begin ? 0 : entry_.end - entry_.begin, shape_string(entry_.shape),
           code_of(entry_.element), bytes);
    entries_.push_back(std::move(entry_));
  }

  std::string where() const { return fmt::format("{}: tensor '{}'", source_, printable(entry_.name)); }

  const std::string& source_;
  std::vector<Frame> stack_;
  std::vector<Entry> entries_;
  Entry entry_;               // the tensor being read
  std::string name_;          // the latest top-level key, until its object opens
  std::string metadata_key_;  // the latest __metadata__ key, for messages
  unsigned fields_ = 0;
  unsigned offset_count_ = 0;
  bool has_metadata_ = false;
};

}  // namespace

const char* code_of(foreign::Element element) {
  for (const DtypeName& d : kDtypes)
    if (d.element == element) return d.code;
  return "?";
}

std::vector<Entry> parse_header(std::string_view json, const std::string& source) {
  HeaderHandler handler(source);
  try {
    Json::sax_parse(json.data(), json.data() + json.size(), &handler);
  } catch (const nlohmann::json::exception& e) {  // not expected from the SAX path; kept a tapegrad::Error anyway
    fail("{}: the JSON header is invalid: {}", source, printable(e.what(), 200));
  }
  std::vector<Entry> entries = handler.take();
  std::vector<const Entry*> by_name;
  by_name.reserve(entries.size());
  for (const Entry& e : entries) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(), [](const Entry* a, const Entry* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i - 1]->name == by_name[i]->name)
      fail("{}: tensor '{}' appears twice in the JSON header", source, printable(by_name[i]->name));
  return entries;
}

void check_tiling(const std::vector<Entry>& entries, std::uint64_t data_bytes, const std::string& source) {
  // Note: as the reference implementation, the entries must tile the data exactly: no overlap (two tensors
  // sharing bytes), no gap, nothing after the last. A file that passes cannot make a tensor read past its end.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != covered)
      fail("{}: tensor '{}' starts at data offset {} but the previous tensor ends at {} ({})", source,
           printable(e->name), e->begin, covered, e->begin < covered ? "overlap" : "gap");
    covered = e->end;
  }
  if (covered != data_bytes)
    fail("{}: the tensors cover {} data bytes but the file holds {} after the header", source, covered, data_bytes);
}

}  // namespace tapegrad::safetensors
