// Reading torch.save's zip format (PyTorch >= 1.6): <name>/data.pkl (the pickled dict), <name>/data/<key> (one
// little-endian storage per key), <name>/version. The zip container is libzip's; the pickle is pickle_reader.cpp's.
#include <zip.h>

#include <map>
#include <memory>

#include <tapegrad/framework/checked_arithmetic.h>
#include <tapegrad/framework/serialize/detail/pickle.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace {

// Note: deflate cannot expand data by more than about 1032:1, so an entry that claims a larger uncompressed size
// than that is refused before anything is allocated for it. torch.save itself stores entries uncompressed.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

class ZipArchive {
 public:
  ZipArchive(std::string_view bytes, const std::string& source) : source_(source) {
    zip_error_t error;
    zip_error_init(&error);
    zip_source_t* from = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
    if (from != nullptr) archive_ = zip_open_from_source(from, ZIP_RDONLY | ZIP_CHECKCONS, &error);
    if (archive_ == nullptr) {
      if (from != nullptr) zip_source_free(from);
      const std::string reason = zip_error_strerror(&error);
      zip_error_fini(&error);
      fail("{}: not a tapegrad checkpoint, and not a readable PyTorch file (it starts like a zip archive, but: {})",
           source, reason);
    }
    zip_error_fini(&error);
    file_size_ = bytes.size();
  }
  ~ZipArchive() { zip_discard(archive_); }
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    const zip_int64_t n = zip_get_num_entries(archive_, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(archive_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
      out.emplace_back(name != nullptr ? name : "");
    }
    return out;
  }
  bool contains(const std::string& name) const { return zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW) >= 0; }

  /// The whole entry, after checking that its size is one the file can hold.
  std::string read(const std::string& name) const {
    const zip_int64_t index = zip_name_locate(archive_, name.c_str(), ZIP_FL_ENC_RAW);
    if (index < 0) fail("{}: the archive has no entry '{}'", source_, name);
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) != 0 ||
        (stat.valid & (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD)) !=
            (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD))
      fail("{}: cannot read the directory entry of '{}': {}", source_, name, zip_strerror(archive_));
    if (stat.comp_size > file_size_)
      fail("{}: entry '{}' claims {} compressed bytes in a {}-byte file", source_, name, stat.comp_size, file_size_);
    const bool stored = stat.comp_method == ZIP_CM_STORE;
    if (!stored && stat.comp_method != ZIP_CM_DEFLATE)
      fail("{}: entry '{}' uses compression method {} (only stored and deflated entries are read)", source_, name,
           stat.comp_method);
    if ((stored && stat.size != stat.comp_size) || (!stored && stat.size / kMaxDeflateRatio > stat.comp_size))
      fail("{}: entry '{}' claims {} bytes from {} stored bytes", source_, name, stat.size, stat.comp_size);
    std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(archive_, static_cast<zip_uint64_t>(index), 0),
                                                          zip_fclose);
    if (!file) fail("{}: cannot open entry '{}': {}", source_, name, zip_strerror(archive_));
    std::string out(static_cast<std::size_t>(stat.size), '\0');
    std::size_t done = 0;
    while (true) {
      // Note: one read past the end, so that libzip's CRC check at the end of the entry runs.
      char spare = 0;
      char* into = done < out.size() ? out.data() + done : &spare;
      const zip_int64_t n = zip_fread(file.get(), into, done < out.size() ? out.size() - done : 1);
      if (n < 0) fail("{}: entry '{}' is corrupt: {}", source_, name, zip_file_strerror(file.get()));
      if (n == 0) break;
      if (done >= out.size()) fail("{}: entry '{}' holds more than the {} bytes it claims", source_, name, stat.size);
      done += static_cast<std::size_t>(n);
    }
    if (done != out.size()) fail("{}: entry '{}' holds {} bytes, not the {} it claims", source_, name, done, stat.size);
    return out;
  }

 private:
  const std::string& source_;
  zip_t* archive_ = nullptr;
  std::uint64_t file_size_ = 0;
};

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
    const std::string text = zip.read(prefix + record);
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    const std::string rest = text.substr(digits);
    if (digits == 0 || digits > 4 || !(rest.empty() || rest == "\n"))
      fail("{}: the version record is not a number", source);
    const int version = std::stoi(text.substr(0, digits));
    // Note: PyTorch 1.6 to 2.x write versions 3 to 10 with the same record layout for state dicts.
    if (version < 1 || version > 10) fail("{}: torch.save file format version {} is not known to tapegrad", source, version);
    return;
  }
}

// Element offset of the last element a strided view touches, checking every step for overflow.
std::int64_t last_index(const pickle::Object& t, const std::string& where) {
  std::int64_t last = t.offset;
  for (std::size_t d = 0; d < t.shape.size(); ++d)
    last = checked_add(last, checked_mul(t.shape[d] - 1, t.strides[d], where.c_str()), where.c_str());
  return last;
}

ForeignTensor materialise(const std::string& key, const pickle::Object& t, const std::string& storage_bytes,
                          const std::string& source) {
  const std::string where = fmt::format("{}: tensor '{}'", source, key);
  const pickle::Object& storage = *t.storage;
  if (t.shape.size() != t.strides.size())
    fail("{} has size {} but stride {}", where, shape_string(t.shape), shape_string(t.strides));
  if (t.offset < 0) fail("{} has a negative storage offset {}", where, t.offset);
  for (std::size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] < 0 || t.strides[d] < 0)
      fail("{} has size {} and stride {}: negative extents are invalid", where, shape_string(t.shape),
           shape_string(t.strides));
  const std::int64_t numel = checked_numel(t.shape, where.c_str());
  if (numel > 0) {
    const std::int64_t last = last_index(t, where);
    if (last >= storage.numel)
      fail("{} (size {}, stride {}, offset {}) reaches element {} of storage '{}', which has {}", where,
           shape_string(t.shape), shape_string(t.strides), t.offset, last, storage.text, storage.numel);
    // Note: a view with stride 0 can describe far more elements than its storage holds (expand()); materialising
    // it could allocate without bound from a tiny file, so such views are refused.
    if (numel > storage.numel)
      fail("{} has {} elements but its storage '{}' only {} (an expanded view; save a contiguous copy)", where, numel,
           storage.text, storage.numel);
  }
  ForeignTensor out;
  out.name = key;
  out.stored_dtype = foreign::element_name(storage.element);
  out.value = foreign::decode_strided(storage_bytes.data(), storage.element, t.shape, t.strides, t.offset);
  return out;
}

}  // namespace

std::vector<ForeignTensor> read_pytorch(std::string_view bytes, const std::string& source) {
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80)  // a pickle's PROTO opcode, not a zip
    fail("{}: legacy torch.save format (PyTorch < 1.6, or _use_new_zipfile_serialization=False); re-save it with "
         "torch.save in PyTorch >= 1.6", source);
  const ZipArchive zip(bytes, source);
  const std::string prefix = record_prefix(zip, source);
  check_version(zip, prefix, source);
  const pickle::Unpickled unpickled = pickle::unpickle(zip.read(prefix + "data.pkl"), source);
  const pickle::Object& root = *unpickled.root;
  if (root.kind != pickle::Kind::Dict) fail("{}: data.pkl does not hold a dict (torch.save(model.state_dict()))", source);

  std::map<const pickle::Object*, std::string> storages;  // storage -> its bytes, each read once
  std::vector<ForeignTensor> out;
  for (const auto& [key, value] : root.entries) {
    if (key->kind != pickle::Kind::String) fail("{}: the state dict has a key that is not a string", source);
    if (value->kind != pickle::Kind::Tensor) fail("{}: state dict entry '{}' is not a tensor", source, key->text);
    const pickle::Object* storage = value->storage;
    auto it = storages.find(storage);
    if (it == storages.end()) {
      const std::string& id = storage->text;
      if (id.empty() || id.find('/') != std::string::npos)
        fail("{}: tensor '{}' names storage '{}', which is not a record name", source, key->text, id);
      std::string data = zip.read(prefix + "data/" + id);
      const std::uint64_t needed = static_cast<std::uint64_t>(checked_mul(
          storage->numel, static_cast<std::int64_t>(foreign::element_bytes(storage->element)), "storage size"));
      if (data.size() < needed)
        fail("{}: storage '{}' of tensor '{}' needs {} bytes ({} x {}) but its record has {}", source, id, key->text,
             needed, storage->numel, foreign::element_name(storage->element), data.size());
      it = storages.emplace(storage, std::move(data)).first;
    }
    out.push_back(materialise(key->text, *value, it->second, source));
  }
  return out;
}

nn::LoadResult load_pytorch(nn::Module& module, const std::string& path, bool strict) {
  const std::string bytes = foreign::read_whole_file(path, "load_pytorch");
  return load_foreign_state(module, read_pytorch(bytes, path), strict, path);
}

}  // namespace tapegrad
