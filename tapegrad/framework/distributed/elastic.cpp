// Periodic checkpoints of a data-parallel run and resuming from them: what is saved, who writes, who reads.
#include <tapegrad/framework/distributed/elastic.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <tapegrad/framework/error.h>

namespace tapegrad::distributed {

namespace {

// Metadata keys of a checkpoint written by PeriodicCheckpointer (the epoch and the global step are the
// Checkpoint's own fields).
constexpr const char* kStepInEpochKey = "periodic.step_in_epoch";
constexpr const char* kWorldSizeKey = "periodic.world_size";

std::string generator_key(const std::string& name, int rank) { return fmt::format("{}@rank{}", name, rank); }

// Note: the collectives carry tensors only, so bytes travel packed into int64 elements (8 per element, the
// last one zero-padded); the byte count travels separately.
Tensor pack_bytes(const std::string& bytes, std::int64_t elements) {
  Tensor packed = zeros({elements}, TensorOptions{}.with_dtype(DType::Int64));
  std::memcpy(packed.raw_data(), bytes.data(), bytes.size());
  return packed;
}

std::string unpack_bytes(const Tensor& packed, std::int64_t size) {
  return std::string(static_cast<const char*>(packed.raw_data()), static_cast<std::size_t>(size));
}

std::int64_t elements_for(std::int64_t bytes) { return std::max<std::int64_t>(1, (bytes + 7) / 8); }

Tensor int64_scalar(std::int64_t value) {
  Tensor tensor = empty({1}, DType::Int64);
  *static_cast<std::int64_t*>(tensor.raw_data()) = value;
  return tensor;
}

std::int64_t int64_value(const Tensor& tensor) { return *static_cast<const std::int64_t*>(tensor.raw_data()); }

// One rank's generator states, each as "<length>:<state>", in registration order.
std::string encode_states(const std::vector<std::pair<std::string, Generator*>>& generators) {
  std::string encoded;
  for (const auto& [name, generator] : generators) {
    const std::string state = generator->state();
    encoded += std::to_string(state.size()) + ":" + state;
  }
  return encoded;
}

std::vector<std::string> decode_states(const std::string& encoded, std::size_t count) {
  std::vector<std::string> states;
  std::size_t at = 0;
  while (states.size() < count) {
    const std::size_t colon = encoded.find(':', at);
    if (colon == std::string::npos) fail("PeriodicCheckpointer: a rank's generator states are malformed");
    const std::size_t length = std::stoull(encoded.substr(at, colon - at));
    states.push_back(encoded.substr(colon + 1, length));
    at = colon + 1 + length;
  }
  return states;
}

const std::string& metadata_of(const Checkpoint& checkpoint, const char* key) {
  const auto found = checkpoint.metadata.find(key);
  if (found == checkpoint.metadata.end())
    fail("PeriodicCheckpointer::restore: the checkpoint has no metadata '{}' (was it written by PeriodicCheckpointer?)",
         key);
  return found->second;
}

}  // namespace

PeriodicCheckpointer::PeriodicCheckpointer(ProcessGroup group, PeriodicCheckpointOptions options)
    : group_(group), quiet_group_(group), options_(std::move(options)) {
  if (options_.path.empty()) fail("PeriodicCheckpointer: options.path is empty");
  if (options_.every_steps < 0) fail("PeriodicCheckpointer: every_steps must be >= 0, got {}", options_.every_steps);
  if (!(options_.every_seconds >= 0))
    fail("PeriodicCheckpointer: every_seconds must be >= 0, got {}", options_.every_seconds);
  // Note: the per-step flag has one shape forever; checking it would double the per-step cost for nothing.
  quiet_group_.set_check_shapes(false);
  last_save_time_ = now();
}

PeriodicCheckpointer& PeriodicCheckpointer::track(nn::Module& model) {
  if (model_ != nullptr) fail("PeriodicCheckpointer::track: a model is tracked already");
  model_ = &model;
  return *this;
}

PeriodicCheckpointer& PeriodicCheckpointer::track(optim::Optimizer& optimizer) {
  if (optimizer_ != nullptr) fail("PeriodicCheckpointer::track: an optimizer is tracked already");
  optimizer_ = &optimizer;
  return *this;
}

PeriodicCheckpointer& PeriodicCheckpointer::track(optim::LRScheduler& scheduler) {
  if (scheduler_ != nullptr) fail("PeriodicCheckpointer::track: a scheduler is tracked already");
  scheduler_ = &scheduler;
  return *this;
}

PeriodicCheckpointer& PeriodicCheckpointer::track(const std::string& name, Generator& generator) {
  if (name.empty() || name.find('@') != std::string::npos)
    fail("PeriodicCheckpointer::track: generator name '{}' must be non-empty and without '@'", name);
  for (const auto& tracked : generators_)
    if (tracked.first == name) fail("PeriodicCheckpointer::track: a generator named '{}' is tracked already", name);
  generators_.emplace_back(name, &generator);
  return *this;
}

double PeriodicCheckpointer::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Checkpoint PeriodicCheckpointer::snapshot() const {
  // Every rank's generators, gathered: the lengths first (they differ), then the states padded to the longest.
  const std::string mine = encode_states(generators_);
  std::vector<std::string> per_rank(static_cast<std::size_t>(group_.world_size()));
  if (!generators_.empty()) {
    const auto lengths = group_.allgather(int64_scalar(static_cast<std::int64_t>(mine.size())));
    std::int64_t longest = 0;
    for (const Tensor& length : lengths) longest = std::max(longest, int64_value(length));
    const auto states = group_.allgather(pack_bytes(mine, elements_for(longest)));
    for (std::size_t r = 0; r < states.size(); ++r) per_rank[r] = unpack_bytes(states[r], int64_value(lengths[r]));
  }
  Checkpoint checkpoint;
  if (model_ != nullptr) checkpoint.set_model(*model_);
  if (optimizer_ != nullptr) checkpoint.optimizer = Checkpoint::from_named(optimizer_->state(), EntryKind::Optimizer);
  if (scheduler_ != nullptr) checkpoint.scheduler = Checkpoint::from_named(scheduler_->state(), EntryKind::Scheduler);
  checkpoint.epoch = position_.epoch;
  checkpoint.step = position_.step;
  checkpoint.metadata[kStepInEpochKey] = std::to_string(position_.step_in_epoch);
  checkpoint.metadata[kWorldSizeKey] = std::to_string(group_.world_size());
  for (int r = 0; r < group_.world_size(); ++r) {
    if (generators_.empty()) break;
    const auto states = decode_states(per_rank[static_cast<std::size_t>(r)], generators_.size());
    for (std::size_t g = 0; g < generators_.size(); ++g)
      checkpoint.rng_states[generator_key(generators_[g].first, r)] = states[g];
  }
  return checkpoint;
}

void PeriodicCheckpointer::restore(const Checkpoint& checkpoint) {
  const std::int64_t step_in_epoch = std::stoll(metadata_of(checkpoint, kStepInEpochKey));
  const int saved_world = std::stoi(metadata_of(checkpoint, kWorldSizeKey));
  if (model_ != nullptr && checkpoint.model.empty())
    fail("PeriodicCheckpointer::restore: a model is tracked but the checkpoint holds none");
  if (optimizer_ != nullptr && checkpoint.optimizer.empty())
    fail("PeriodicCheckpointer::restore: an optimizer is tracked but the checkpoint holds no optimizer state");
  if (scheduler_ != nullptr && checkpoint.scheduler.empty())
    fail("PeriodicCheckpointer::restore: a scheduler is tracked but the checkpoint holds no scheduler state");
  // Every generator must have been saved (by rank 0 at least); a rank the saving job did not have keeps its own.
  std::vector<const std::string*> states;
  for (const auto& [name, generator] : generators_) {
    if (checkpoint.rng_states.find(generator_key(name, 0)) == checkpoint.rng_states.end())
      fail("PeriodicCheckpointer::restore: the checkpoint has no generator '{}'", name);
    const auto own = checkpoint.rng_states.find(generator_key(name, group_.rank()));
    states.push_back(own == checkpoint.rng_states.end() ? nullptr : &own->second);
  }
  // Note: each load_state checks everything before it changes anything, model first, as restore_checkpoint.
  if (model_ != nullptr) model_->load_state(checkpoint.model_state(), /*strict=*/true, checkpoint.model_versions);
  if (optimizer_ != nullptr) optimizer_->load_state(Checkpoint::as_named(checkpoint.optimizer));
  if (scheduler_ != nullptr) scheduler_->load_state(Checkpoint::as_named(checkpoint.scheduler));
  for (std::size_t g = 0; g < generators_.size(); ++g)
    if (states[g] != nullptr) generators_[g].second->set_state(*states[g]);
  position_ = TrainingPosition{checkpoint.epoch, step_in_epoch, checkpoint.step};
  last_save_step_ = position_.step;
  last_save_time_ = now();
  resumed_world_size_ = saved_world;
}

bool PeriodicCheckpointer::resume() {
  // Rank 0 reads the file and broadcasts its size (-1: no file) and then its bytes.
  std::string bytes;
  std::int64_t size = -1;
  if (group_.rank() == 0 && std::filesystem::exists(options_.path)) {
    std::ifstream in(options_.path, std::ios::binary);
    if (!in) fail("PeriodicCheckpointer::resume: cannot open {}", options_.path);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    size = static_cast<std::int64_t>(bytes.size());
  }
  Tensor size_tensor = int64_scalar(size);
  group_.broadcast(size_tensor);
  size = int64_value(size_tensor);
  if (size < 0) return false;
  Tensor packed = pack_bytes(group_.rank() == 0 ? bytes : std::string(), elements_for(size));
  group_.broadcast(packed);
  std::istringstream in(unpack_bytes(packed, size));
  restore(load_checkpoint(in, options_.path));
  return true;
}

bool PeriodicCheckpointer::due() {
  const bool by_steps = options_.every_steps > 0 && position_.step - last_save_step_ >= options_.every_steps;
  if (by_steps || options_.every_seconds <= 0) return by_steps;
  // Note: ranks' clocks disagree (and run on other hosts), so rank 0's decides for all; a save is a collective.
  const bool mine = group_.rank() == 0 && now() - last_save_time_ >= options_.every_seconds;
  if (group_.world_size() == 1) return mine;
  Tensor flag = int64_scalar(mine ? 1 : 0);
  quiet_group_.broadcast(flag);
  return int64_value(flag) != 0;
}

bool PeriodicCheckpointer::step_done() {
  ++position_.step;
  ++position_.step_in_epoch;
  if (!due()) return false;
  save();
  return true;
}

void PeriodicCheckpointer::epoch_done() {
  ++position_.epoch;
  position_.step_in_epoch = 0;
}

void PeriodicCheckpointer::save() { save(options_.path); }

void PeriodicCheckpointer::save(const std::string& path) {
  const double start = now();
  const Checkpoint checkpoint = snapshot();
  // Note: the replicas are identical, so one file from rank 0 is the run; save_checkpoint writes a temporary file
  // and renames it over `path`, so a rank killed during the write leaves the previous checkpoint whole.
  if (group_.rank() == 0) save_checkpoint(checkpoint, path);
  // Note: no rank runs past a checkpoint before the file is complete, so a failure after this step loses at most
  // the steps since this save. (Without it, a rank could die in a later step while rank 0 still writes, and the
  // job would restart from the save before.)
  group_.barrier();
  ++saves_;
  last_save_step_ = position_.step;
  last_save_time_ = now();
  last_save_seconds_ = last_save_time_ - start;
}

PeriodicCheckpointer::Batches PeriodicCheckpointer::remaining_batches(data::DataLoader& loader) const {
  loader.set_epoch(static_cast<std::uint64_t>(position_.epoch));
  Batches batches{loader.begin(), loader.end()};
  // Note: replaying the epoch's first batches (not jumping over them) puts the augmentation stream where it was.
  for (std::int64_t i = 0; i < position_.step_in_epoch && !(batches.first == batches.last); ++i) ++batches.first;
  return batches;
}

}  // namespace tapegrad::distributed
