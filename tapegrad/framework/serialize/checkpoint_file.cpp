// Checkpoints as files and as model state: paths (regular files only, replaced atomically), the Checkpoint
// helpers, and save/load of a module. The format is checkpoint.cpp (header line) and checkpoint_archive.cpp.
#include <cerrno>
#include <cstring>
#include <set>
#include <sys/mman.h>

#include <tapegrad/framework/detail/file_io.h>
#include <tapegrad/framework/serialize/checkpoint.h>
#include <tapegrad/framework/serialize/detail/checkpoint_format.h>
#include <tapegrad/framework/serialize/detail/foreign.h>

namespace tapegrad {

const char* entry_kind_name(EntryKind kind) {
  switch (kind) {
    case EntryKind::Parameter: return "parameter";
    case EntryKind::Buffer: return "buffer";
    case EntryKind::Optimizer: return "optimizer";
    case EntryKind::Scheduler: return "scheduler";
    case EntryKind::Other: break;
  }
  return "other";
}

// ---- Checkpoint helpers ----
void Checkpoint::set_model(const nn::Module& module) {
  model.clear();
  std::set<std::string> parameter_names;
  for (const auto& [name, p] : module.named_parameters()) parameter_names.insert(name);
  for (const auto& [name, t] : module.state())
    model.push_back({name, parameter_names.count(name) ? EntryKind::Parameter : EntryKind::Buffer, t});
  model_versions = module.state_versions();
}

nn::NamedTensors Checkpoint::as_named(const std::vector<CheckpointEntry>& entries) {
  nn::NamedTensors out;
  for (const auto& e : entries) out.emplace_back(e.name, e.value);
  return out;
}

nn::NamedTensors Checkpoint::model_state() const { return as_named(model); }

std::vector<CheckpointEntry> Checkpoint::from_named(const nn::NamedTensors& tensors, EntryKind kind) {
  std::vector<CheckpointEntry> out;
  for (const auto& [name, t] : tensors) out.push_back({name, kind, t.detach()});
  return out;
}

// ---- files ----
namespace {

// Note: a file is mapped, not read: the kernel hands over its page-cache pages, with no copy into a fresh
// (page-faulted, zeroed) buffer; MAP_POPULATE reads it in one sequential sweep. The mapping is of exactly
// the size fstat reported, so the parser never sees more than the file holds.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const detail::RegularFile file(path, "load");
    size_ = static_cast<std::size_t>(file.size());
    if (size_ > 0) {
      void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd(), 0);
      if (address == MAP_FAILED) fail("load: cannot map {}: {}", path, std::strerror(errno));
      data_ = static_cast<const char*>(address);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

void save_checkpoint(const Checkpoint& given, const std::string& path, ArchiveKind kind) {
  serialize_detail::check_savable(given, "save");
  // A view (non-contiguous) is saved as its values in row-major order, like any other tensor.
  const Checkpoint* source = &given;
  Checkpoint copy;
  for (auto* entries : {&given.model, &given.optimizer, &given.scheduler})
    for (const CheckpointEntry& entry : *entries)
      if (entry.value.defined() && !entry.value.is_contiguous()) source = &copy;
  if (source == &copy) {
    copy = given;
    for (auto* entries : {&copy.model, &copy.optimizer, &copy.scheduler})
      for (CheckpointEntry& entry : *entries) entry.value = entry.value.detach().contiguous();
  }
  const Checkpoint& checkpoint = *source;
  detail::replace_file(path, "save", [&](std::FILE* file) {
    try {
      return serialize_detail::write_checkpoint_file(checkpoint, kind, file);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // the archive's own errors
      fail("save: writing {} failed: {}", path, e.what());
    }
  });
}

Checkpoint load_checkpoint(const std::string& path) {
  const MappedFile file(path);
  return serialize_detail::decode(file.bytes(), path);
}

CheckpointHeader read_checkpoint_header(const std::string& path) {
  detail::RegularFile file(path, "load");
  std::string head(serialize_detail::kMaxHeaderBytes + 1, '\0');
  head.resize(file.read_some(head.data(), head.size()));
  std::size_t length = 0;
  return serialize_detail::parse_header(head, length, path);
}

// ---- modules ----
void save(const nn::Module& module, const std::string& path, ArchiveKind kind) {
  Checkpoint checkpoint;
  checkpoint.set_model(module);
  save_checkpoint(checkpoint, path, kind);
}

void save(const nn::Module& module, std::ostream& out, ArchiveKind kind) {
  Checkpoint checkpoint;
  checkpoint.set_model(module);
  save_checkpoint(checkpoint, out, kind);
}

namespace {
nn::LoadResult load_into(nn::Module& module, const Checkpoint& checkpoint, bool strict, const std::string& source) {
  try {
    return module.load_state(checkpoint.model_state(), strict, checkpoint.model_versions);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}
}  // namespace

nn::LoadResult load(nn::Module& module, const std::string& path, bool strict) {
  if (auto result = foreign::load_if_foreign(module, path, strict)) return *result;  // a PyTorch zip or safetensors
  return load_into(module, load_checkpoint(path), strict, path);
}

nn::LoadResult load(nn::Module& module, std::istream& in, bool strict) {
  return load_into(module, load_checkpoint(in), strict, "<stream>");
}

}  // namespace tapegrad
