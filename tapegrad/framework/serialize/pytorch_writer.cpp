// Writing what torch.save(model.state_dict(), path) writes: a pickled OrderedDict of _rebuild_tensor_v2 calls
// whose storages are zip records, stored uncompressed with their data 64-byte aligned (as PyTorch's writer does,
// so a reader can map them in place). The zip container is libzip's.
#include <zip.h>

#include <cstring>
#include <limits>

#include <tapegrad/framework/serialize/detail/foreign.h>
#include <tapegrad/framework/serialize/interop.h>

namespace tapegrad {
namespace {

// Protocol-2 pickle opcodes, the subset written here (each one the reader accepts).
class PickleWriter {
 public:
  PickleWriter() { out_ += "\x80\x02"; }
  void op(char code) { out_ += code; }
  void global(const char* module, const char* name) { out_ += fmt::format("c{}\n{}\n", module, name); }
  void string(const std::string& text) {
    out_ += 'X';
    append_le(static_cast<std::uint32_t>(text.size()));
    out_ += text;
  }
  void integer(std::int64_t value) {
    if (value >= std::numeric_limits<std::int32_t>::min() && value <= std::numeric_limits<std::int32_t>::max()) {
      out_ += 'J';
      append_le(static_cast<std::int32_t>(value));
    } else {
      out_ += "\x8a\x08";  // LONG1 with 8 two's-complement bytes
      append_le(value);
    }
  }
  void tuple(const Shape& values) {
    op('(');
    for (const std::int64_t v : values) integer(v);
    op('t');
  }
  std::string finish() { return out_ + '.'; }

 private:
  template <class T>
  void append_le(T value) {
    char bytes[sizeof value];
    std::memcpy(bytes, &value, sizeof value);
    out_.append(bytes, sizeof value);
  }
  std::string out_;
};

const char* storage_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "FloatStorage";
    case DType::Float64: return "DoubleStorage";
    case DType::Int64: break;
    case DType::BFloat16: return "BFloat16Storage";
  }
  return "LongStorage";
}

// OrderedDict([(name, _rebuild_tensor_v2(storage i, 0, size, contiguous stride, False, OrderedDict())), ...]).
std::string state_pickle(const nn::NamedTensors& state) {
  PickleWriter p;
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.op('(');
  for (std::size_t i = 0; i < state.size(); ++i) {
    const Tensor& t = state[i].second;
    p.string(state[i].first);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');  // persistent id ('storage', type, key, location, numel)
    p.string("storage");
    p.global("torch", storage_type(t.dtype()));
    p.string(std::to_string(i));
    p.string("cpu");
    p.integer(t.numel());
    p.op('t');
    p.op('Q');
    p.integer(0);
    p.tuple(t.shape());
    p.tuple(contiguous_strides(t.shape()));
    p.op('\x89');  // requires_grad False: a state dict holds detached tensors
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
  }
  p.op('u');
  return p.finish();
}

class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path) : path_(path) {
    int code = 0;
    archive_ = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
    if (archive_ == nullptr) {
      zip_error_t error;
      zip_error_init_with_code(&error, code);
      const std::string reason = zip_error_strerror(&error);
      zip_error_fini(&error);
      fail("save_pytorch: cannot create {}: {}", path, reason);
    }
  }
  ~ZipWriter() {
    if (archive_ != nullptr) zip_discard(archive_);
  }
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  /// Adds a stored record; `data` must stay alive until close().
  void add(const std::string& name, const void* data, std::size_t size) {
    // Note: libzip writes records in the order they are added, each as a 30-byte local header, the name, the
    // local extra fields and the data. An "FB" extra field (PyTorch's own padding record) of the right length
    // therefore puts the data at a multiple of 64, as torch.save does. Nothing in torch 1.13 requires it; a
    // reader that maps storages in place does.
    const std::uint64_t header = offset_ + 30 + name.size() + 4;
    const std::size_t padding = static_cast<std::size_t>((64 - header % 64) % 64);
    static const char zeros[64] = {};
    zip_source_t* source = zip_source_buffer(archive_, size > 0 ? data : zeros, size, 0);
    if (source == nullptr) fail("save_pytorch: {}: {}", path_, zip_strerror(archive_));
    const zip_int64_t index = zip_file_add(archive_, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      fail("save_pytorch: {}: cannot add {}: {}", path_, name, zip_strerror(archive_));
    }
    const auto entry = static_cast<zip_uint64_t>(index);
    if (zip_set_file_compression(archive_, entry, ZIP_CM_STORE, 0) != 0 ||
        zip_file_extra_field_set(archive_, entry, 0x4246 /* "FB" */, ZIP_EXTRA_FIELD_NEW,
                                 reinterpret_cast<const zip_uint8_t*>(zeros), static_cast<zip_uint16_t>(padding),
                                 ZIP_FL_LOCAL) != 0)
      fail("save_pytorch: {}: {}: {}", path_, name, zip_strerror(archive_));
    offset_ = header + padding + size;
  }

  /// Writes the archive (libzip writes a temporary file and renames it over the path).
  void close() {
    if (zip_close(archive_) != 0) fail("save_pytorch: writing {} failed: {}", path_, zip_strerror(archive_));
    archive_ = nullptr;
  }

 private:
  std::string path_;
  zip_t* archive_ = nullptr;
  std::uint64_t offset_ = 0;
};

}  // namespace

void save_pytorch(const nn::Module& module, const std::string& path) {
  nn::NamedTensors state = pytorch_state(module);
  for (auto& entry : state)  // a view is saved as its values, in row-major order
    if (!entry.second.is_contiguous()) entry.second = entry.second.detach().contiguous();
  const std::string pickled = state_pickle(state);
  static const std::string version = "3\n";  // the record layout of PyTorch 1.6 to 1.13
  // Note: tensor storage is contiguous and the machine little-endian, so each record is the tensor's own bytes.
  ZipWriter zip(path);
  zip.add("archive/data.pkl", pickled.data(), pickled.size());
  for (std::size_t i = 0; i < state.size(); ++i) {
    const Tensor& t = state[i].second;
    zip.add(fmt::format("archive/data/{}", i), t.raw_data(),
            static_cast<std::size_t>(t.numel()) * element_size(t.dtype()));
  }
  zip.add("archive/version", version.data(), version.size());
  zip.close();
}

}  // namespace tapegrad
