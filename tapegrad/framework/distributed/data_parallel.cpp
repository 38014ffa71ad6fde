// DistributedDataParallel: rank 0's state to everyone at the start, then gradients averaged by the Reducer
// (reducer.cpp), during backward or after it.
#include <tapegrad/framework/distributed/data_parallel.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad::distributed {

namespace {

// Note: for A/B measurements of a program one cannot edit (the DDP example), as TAPEGRAD_CONV_PATH is for
// convolutions; a malformed value is an error rather than silently ignored.
std::size_t bytes_from_environment(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || value == 0) fail("DistributedDataParallel: {}={} is not a positive number of bytes", name, text);
  return static_cast<std::size_t>(value);
}

bool flag_from_environment(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  const std::string value = text;
  if (value == "0") return false;
  if (value == "1") return true;
  fail("DistributedDataParallel: {}={} must be 0 or 1", name, value);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> model, ProcessGroup group,
                                                 DataParallelOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  if (!model_) fail("DistributedDataParallel: the model is null");
  options_.bucket_bytes = bytes_from_environment("TAPEGRAD_DDP_BUCKET_BYTES", options_.bucket_bytes);
  options_.first_bucket_bytes = bytes_from_environment("TAPEGRAD_DDP_FIRST_BUCKET_BYTES", options_.first_bucket_bytes);
  options_.overlap_communication = flag_from_environment("TAPEGRAD_DDP_OVERLAP", options_.overlap_communication);
  if (options_.bucket_bytes == 0) fail("DistributedDataParallel: bucket_bytes must be positive");
  if (options_.first_bucket_bytes == 0) fail("DistributedDataParallel: first_bucket_bytes must be positive");
  broadcast_state();
  reducer_ = Reducer::create(group_.duplicate(), ReducerOptions{options_.bucket_bytes, options_.first_bucket_bytes,
                                                                options_.overlap_communication});
}

DistributedDataParallel::~DistributedDataParallel() {
  const char* profile = std::getenv("TAPEGRAD_DDP_PROFILE");
  if (!profile || std::string(profile) != "1" || !reducer_) return;
  const ReducerStatistics& s = reducer_->statistics();
  const double steps = s.reductions > 0 ? static_cast<double>(s.reductions) : 1.0;
  std::string sizes;
  for (std::size_t bytes : reducer_->bucket_bytes()) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(bytes);
  }
  std::fprintf(stderr,
               "tapegrad ddp profile: rank %d of %d, overlap %d, bucket_bytes %zu, first_bucket_bytes %zu, buckets "
               "[%s] bytes, %zu reductions (%zu during backward), %zu bucket allreduces (%zu started before "
               "backward's last record); per reduction: in backward %.3f ms (MPI_Test %.3f ms), after backward "
               "%.3f ms (waiting in MPI %.3f ms)\n",
               group_.rank(), group_.world_size(), options_.overlap_communication ? 1 : 0, options_.bucket_bytes,
               options_.first_bucket_bytes, sizes.c_str(), s.reductions, s.overlapped, s.buckets,
               s.buckets_started_early, 1e3 * s.hook_seconds / steps, 1e3 * s.progress_seconds / steps,
               1e3 * s.exposed_seconds / steps, 1e3 * s.wait_seconds / steps);
}

void DistributedDataParallel::broadcast_state() {
  NoGradGuard no_grad;
  for (Tensor parameter : model_->parameters()) group_.broadcast(parameter, 0);
  broadcast_buffers();
}

void DistributedDataParallel::broadcast_buffers() {
  NoGradGuard no_grad;
  for (Tensor buffer : model_->buffers()) group_.broadcast(buffer, 0);
}

std::vector<Tensor> DistributedDataParallel::trainable_parameters() const {
  std::vector<Tensor> parameters;
  for (const Tensor& parameter : model_->parameters())
    if (parameter.requires_grad()) parameters.push_back(parameter);
  return parameters;
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && model_->is_training()) broadcast_buffers();
  if (options_.overlap_communication && sync_enabled_ && model_->is_training() && is_grad_enabled())
    reducer_->prepare_for_backward(trainable_parameters());
  return model_->forward(input);
}

void DistributedDataParallel::synchronize_gradients() { reducer_->synchronize(trainable_parameters()); }

}  // namespace tapegrad::distributed
