// Reading torch.save's zip format (PyTorch >= 1.6): <name>/data.pkl (the pickled dict), <name>/data/<key> (one
// little-endian storage per key), <name>/version. The zip container is zip_archive.cpp's; the pickle is
// pickle_reader.cpp's. Every storage is read once, only as far as the tensors that view it reach, and only
// after every view has been checked; the tensors are views of it, as in PyTorch.
#include <map>
#include <memory>
#include <new>
#include <set>
#include <unordered_map>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/detail/file_io.h>
#include <tapegrad/framework/detail/printable.h>
#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/serialize/detail/pickle.h>
#include <tapegrad/framework/serialize/detail/zip_archive.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace {

using foreign::ZipArchive;
using foreign::ZipEntry;

// Note: data.pkl of a state dict takes about 100 bytes per tensor; 64 MiB is ~600,000 tensors, and a pickle
// that large would hit the interpreter's value limit first.
constexpr std::uint64_t kMaxPickleBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kMaxVersionBytes = 16;

[[noreturn]] void legacy_format(const std::string& source) {
  fail("{}: legacy torch.save format (PyTorch < 1.6, or _use_new_zipfile_serialization=False): tapegrad reads "
       "only the zip format; re-save it with torch.save in PyTorch >= 1.6",
       source);
}

// "<name>/" of the archive's records: torch.save names the folder after the file (1.x) or "archive" (2.x).
std::string record_prefix(const ZipArchive& zip, const std::string& source) {
  for (const std::string& name : zip.names()) {
    const std::size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) return name.substr(0, slash + 1);
  }
  fail("{}: a zip archive without <name>/data.pkl is not a torch.save file", source);
}

void check_version(const ZipArchive& zip, const std::string& prefix, const std::string& source) {
  for (const char* record : {"version", ".data/version"}) {
    if (!zip.contains(prefix + record)) continue;
    const std::string text = zip.read_small(zip.entry(prefix + record), kMaxVersionBytes, "the version record");
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    const std::string rest = text.substr(digits);
    if (digits == 0 || digits > 4 || !(rest.empty() || rest == "\n"))
      fail("{}: the version record '{}' is not a number", source, detail::printable(text));
    const int version = std::stoi(text.substr(0, digits));
    // Note: PyTorch 1.6 to 2.x write versions 3 to 10 with the same record layout for state dicts.
    if (version < 1 || version > 10) fail("{}: torch.save file format version {} is not known to tapegrad", source, version);
    return;
  }
}

// Note: PyTorch >= 2.1 writes <name>/byteorder ("little" or "big", the saving machine's) and byte-swaps a big-endian
// file's storages on loading. tapegrad reads storages as little-endian, so a big-endian file would load as garbage.
void check_byteorder(const ZipArchive& zip, const std::string& prefix, const std::string& source) {
  if (!zip.contains(prefix + "byteorder")) return;  // older files: little-endian
  const std::string text = zip.read_small(zip.entry(prefix + "byteorder"), kMaxVersionBytes, "the byteorder record");
  if (text == "little") return;
  if (text == "big")
    fail("{}: the file was saved on a big-endian machine (byteorder record 'big'); tapegrad reads little-endian "
         "storages only: re-save it on a little-endian machine",
         source);
  fail("{}: the byteorder record '{}' is neither 'little' nor 'big'", source, detail::printable(text));
}

// One state dict entry: its key and the view it is, checked against its storage.
struct View {
  std::string key;
  const pickle::TensorView* tensor = nullptr;
  std::int64_t numel = 0;
  std::int64_t end = 0;  // one past the last storage element it touches (0 when empty)
};

View check_view(const std::string& key, const pickle::TensorView& t, const std::string& source) {
  const std::string where = fmt::format("{}: tensor '{}'", source, detail::printable(key));
  const pickle::Object& storage = *t.storage;
  const std::string storage_key = detail::printable(storage.text);
  if (t.shape.size() != t.strides.size())
    fail("{} has size {} but stride {}", where, shape_string(t.shape), shape_string(t.strides));
  if (t.offset < 0) fail("{} has a negative storage offset {}", where, t.offset);
  for (std::size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] < 0 || t.strides[d] < 0)
      fail("{} has size {} and stride {}: negative extents are invalid", where, shape_string(t.shape),
           shape_string(t.strides));
  View view{key, &t, checked_numel(t.shape, where.c_str()), 0};
  if (view.numel > 0) {
    std::int64_t last = t.offset;
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      last = checked_add(last, checked_mul(t.shape[d] - 1, t.strides[d], where.c_str()), where.c_str());
    if (last >= storage.integer)
      fail("{} (size {}, stride {}, offset {}) reaches element {} of storage '{}', which has {}", where,
           shape_string(t.shape), shape_string(t.strides), t.offset, last, storage_key, storage.integer);
    // Note: a view with stride 0 can describe far more elements than its storage holds (expand()); copying it
    // into a model could allocate without bound from a tiny file, so such views are refused.
    if (view.numel > storage.integer)
      fail("{} has {} elements but its storage '{}' only {} (an expanded view; save a contiguous copy)", where,
           view.numel, storage_key, storage.integer);
    view.end = last + 1;
  }
  return view;
}

// A parsed torch.save file: the archive, its pickle and every state dict entry checked as a view of its storage.
class PyTorchFile {
 public:
  PyTorchFile(std::unique_ptr<ZipArchive> zip, const std::string& source) : zip_(std::move(zip)), source_(source) {
    prefix_ = record_prefix(*zip_, source);
    check_version(*zip_, prefix_, source);
    check_byteorder(*zip_, prefix_, source);
    pickled_ = pickle::unpickle(zip_->read_small(zip_->entry(prefix_ + "data.pkl"), kMaxPickleBytes, "data.pkl"),
                                source);
    const pickle::Object& root = *pickled_.root;
    if (root.kind != pickle::Kind::Dict)
      fail("{}: data.pkl does not hold a dict (torch.save(model.state_dict()))", source);
    for (const auto& [key, value] : root.entries) {
      if (key->kind != pickle::Kind::String) fail("{}: the state dict has a key that is not a string", source);
      if (value->kind != pickle::Kind::Tensor)
        fail("{}: state dict entry '{}' is not a tensor", source, detail::printable(key->text));
      const std::string& id = value->tensor->storage->text;
      if (id.empty() || id.find('/') != std::string::npos)
        fail("{}: tensor '{}' names storage '{}', which is not a record name", source, detail::printable(key->text),
             detail::printable(id));
      views_.push_back(check_view(key->text, *value->tensor, source));
    }
  }

  const std::vector<View>& views() const { return views_; }

  /// The tensors of the entries `wanted` says yes to, each a view of its storage; the others are undefined. Each
  /// storage is read once, up to the furthest element a wanted view reaches.
  std::vector<ForeignTensor> tensors(const std::vector<bool>& wanted) {
    std::unordered_map<const pickle::Object*, std::int64_t> reach;  // storage -> elements needed
    for (std::size_t i = 0; i < views_.size(); ++i)
      if (wanted[i]) {
        std::int64_t& r = reach[views_[i].tensor->storage];
        r = std::max(r, views_[i].end);
      }
    std::unordered_map<const pickle::Object*, Tensor> decoded;
    std::vector<ForeignTensor> out;
    for (std::size_t i = 0; i < views_.size(); ++i) {
      const View& v = views_[i];
      const pickle::Object* storage = v.tensor->storage;
      ForeignTensor t;
      t.name = v.key;
      t.stored_dtype = foreign::element_name(storage->element);
      if (wanted[i] && v.numel == 0) {
        t.value = empty(v.tensor->shape, foreign::widened_dtype(storage->element));
      } else if (wanted[i]) {
        auto it = decoded.find(storage);
        if (it == decoded.end()) it = decoded.emplace(storage, decode(*storage, reach.at(storage), v.key)).first;
        t.value = detail::make_view(it->second, v.tensor->shape, v.tensor->strides, v.tensor->offset);
      }
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  // The first `elements` of a storage record, widened, as one flat tensor.
  Tensor decode(const pickle::Object& storage, std::int64_t elements, const std::string& key) const {
    const std::string record = prefix_ + "data/" + storage.text;
    const std::string shown = detail::printable(storage.text);
    const auto stored_size = static_cast<std::int64_t>(foreign::element_bytes(storage.element));
    const auto declared = static_cast<std::uint64_t>(checked_mul(storage.integer, stored_size, "storage size"));
    const ZipEntry entry = zip_->entry(record);
    if (entry.size != declared)
      fail("{}: storage '{}' of tensor '{}' is declared as {} x {} = {} bytes but its record holds {}", source_, shown,
           detail::printable(key), storage.integer, foreign::element_name(storage.element), declared, entry.size);
    const std::uint64_t bytes = static_cast<std::uint64_t>(elements) * static_cast<std::uint64_t>(stored_size);
    zip_->prove_prefix(entry, bytes);
    try {
      Tensor out = empty({elements}, foreign::widened_dtype(storage.element));
      if (element_size(out.dtype()) == static_cast<std::size_t>(stored_size)) {  // same bits: no conversion
        zip_->read_prefix_into(entry, bytes, static_cast<char*>(out.raw_data()));
      } else {
        std::int64_t done = 0;  // elements widened so far; the pieces hold whole elements only at the end
        std::string carry;
        zip_->read_prefix(entry, bytes, [&](const char* data, std::size_t size) {
          carry.append(data, size);
          const auto whole = static_cast<std::int64_t>(carry.size()) / stored_size;
          foreign::decode_contiguous(carry.data(), storage.element, whole, out, done);
          done += whole;
          carry.erase(0, static_cast<std::size_t>(whole * stored_size));
        });
      }
      return out;
    } catch (const std::bad_alloc&) {
      fail("{}: storage '{}' of tensor '{}': cannot allocate {} bytes for its {} elements", source_, shown,
           detail::printable(key), bytes, elements);
    }
  }

  std::unique_ptr<ZipArchive> zip_;
  const std::string& source_;
  std::string prefix_;
  pickle::Unpickled pickled_;
  std::vector<View> views_;
};

bool is_legacy(std::string_view first_bytes) {
  return !first_bytes.empty() && static_cast<unsigned char>(first_bytes[0]) == 0x80;  // a pickle's PROTO opcode
}

// Runs `read`, turning an allocation failure anywhere in it into a tapegrad::Error that names the file.
template <class F>
auto guarded(const std::string& source, F&& read) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while reading the file", source);
  }
}

}  // namespace

std::vector<ForeignTensor> read_pytorch(std::string_view bytes, const std::string& source) {
  if (is_legacy(bytes)) legacy_format(source);
  return guarded(source, [&] {
    PyTorchFile file(std::make_unique<ZipArchive>(bytes, source), source);
    return file.tensors(std::vector<bool>(file.views().size(), true));
  });
}

nn::LoadResult load_pytorch(nn::Module& module, const std::string& path, bool strict) {
  detail::RegularFile input(path, "load_pytorch");
  char head[1] = {};
  if (is_legacy(std::string_view(head, input.read_some(head, 1)))) legacy_format(path);
  return guarded(path, [&] {
    PyTorchFile file(std::make_unique<ZipArchive>(input.fd(), input.size(), path), path);
    // Note: every entry is checked against the model before a storage is read: a shape the model does not have
    // is refused with nothing allocated, and an entry the model does not have is never read (strict loading
    // still refuses it, by name).
    std::map<std::string, Shape> expected;
    for (const auto& [name, tensor] : module.state()) expected.emplace(name, tensor.shape());
    std::vector<bool> wanted;
    for (const View& v : file.views()) {
      const auto it = expected.find(v.key);
      if (it != expected.end() && it->second != v.tensor->shape)
        fail("{}: load_state: size mismatch for {}: checkpoint {}, model {}", path, detail::printable(v.key),
             shape_string(v.tensor->shape), shape_string(it->second));
      wanted.push_back(it != expected.end());
    }
    return load_foreign_state(module, file.tensors(wanted), strict, path);
  });
}

}  // namespace tapegrad
