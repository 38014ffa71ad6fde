#pragma once
/// Saving and loading model state and whole training runs (Boost.Serialization archives).
#include <tapegrad/export.h>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include <tapegrad/framework/module.h>

TAPEGRAD_API_BEGIN

namespace tapegrad {

/// Binary is fast and compact (this architecture's float layout); text is portable and inspectable.
enum class ArchiveKind : std::uint8_t { Binary = 0, Text = 1 };

/// What an entry of a checkpoint holds; printed by tapegrad-inspect.
enum class EntryKind : std::uint8_t { Parameter = 0, Buffer = 1, Optimizer = 2, Scheduler = 3, Other = 4 };

/// One named tensor of a checkpoint.
struct CheckpointEntry {
  std::string name;
  EntryKind kind = EntryKind::Other;
  Tensor value;
};

/// Everything a training run needs to resume exactly: model state, optimizer and scheduler state, progress,
/// random generator states and free-form metadata. A model file is a Checkpoint with only `model`.
struct Checkpoint {
  std::vector<CheckpointEntry> model;          // parameters and persistent buffers, by dotted name
  std::map<std::string, int> model_versions;   // Module::state_versions() at save time
  std::vector<CheckpointEntry> optimizer;
  std::vector<CheckpointEntry> scheduler;
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  std::map<std::string, std::string> rng_states;  // name -> Generator::state()
  std::map<std::string, std::string> metadata;

  /// Fills `model` and `model_versions` from a module (parameters marked Parameter, buffers Buffer).
  void set_model(const nn::Module& module);
  /// The model entries as the NamedTensors load_state takes.
  nn::NamedTensors model_state() const;
  static nn::NamedTensors as_named(const std::vector<CheckpointEntry>& entries);
  static std::vector<CheckpointEntry> from_named(const nn::NamedTensors& tensors, EntryKind kind);
};

/// The fixed first line of every checkpoint file, parsed.
struct CheckpointHeader {
  std::uint32_t format_version = 0;
  ArchiveKind kind = ArchiveKind::Binary;
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc32 = 0;
};

/// The newest file format this build writes; it reads every version up to it.
constexpr std::uint32_t kCheckpointFormatVersion = 1;

/// Writes a checkpoint. Note: a file is written to a temporary name in the same directory, flushed and
/// renamed over `path`, so an interrupted save never destroys the previous file.
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path, ArchiveKind kind = ArchiveKind::Binary);
void save_checkpoint(const Checkpoint& checkpoint, std::ostream& out, ArchiveKind kind = ArchiveKind::Binary);
/// Reads a checkpoint; any defect (not a tapegrad file, truncation, corruption, a future version) throws
/// tapegrad::Error naming the source and, where it can, the entry.
Checkpoint load_checkpoint(const std::string& path);
Checkpoint load_checkpoint(std::istream& in, const std::string& source_name = "<stream>");
/// Reads only the header line (for tools).
CheckpointHeader read_checkpoint_header(const std::string& path);

/// Saves every parameter and persistent buffer of `module`.
void save(const nn::Module& module, const std::string& path, ArchiveKind kind = ArchiveKind::Binary);
void save(const nn::Module& module, std::ostream& out, ArchiveKind kind = ArchiveKind::Binary);
/// Loads a file written by save() into `module`; the module is unchanged when anything is wrong.
nn::LoadResult load(nn::Module& module, const std::string& path, bool strict = true);
nn::LoadResult load(nn::Module& module, std::istream& in, bool strict = true);

/// "parameter", "buffer", ...
const char* entry_kind_name(EntryKind kind);

}  // namespace tapegrad

TAPEGRAD_API_END
