// DistributedDataParallel: rank 0's state to everyone at the start, then bucketed gradient averaging.
#include <tapegrad/framework/distributed/data_parallel.h>

#include <cstring>
#include <vector>

#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad::distributed {

namespace {

std::size_t bytes_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()) * element_size(t.dtype()); }

// Consecutive parameters of one dtype, together at most about `bucket_bytes` (a larger tensor is a bucket alone).
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<Tensor>& tensors, std::size_t bucket_bytes) {
  std::vector<std::vector<std::size_t>> buckets;
  std::size_t filled = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const bool fits = !buckets.empty() && tensors[buckets.back().front()].dtype() == tensors[i].dtype() &&
                      filled + bytes_of(tensors[i]) <= bucket_bytes;
    if (!fits) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes_of(tensors[i]);
  }
  return buckets;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> model, ProcessGroup group,
                                                 DataParallelOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  if (!model_) fail("DistributedDataParallel: the model is null");
  if (options_.bucket_bytes == 0) fail("DistributedDataParallel: bucket_bytes must be positive");
  broadcast_state();
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

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && model_->is_training()) broadcast_buffers();
  return model_->forward(input);
}

// Note: which parameters have a gradient can differ between ranks (a branch one rank's data did not take),
// and every rank must make the same allreduce calls, so the has-gradient flags are summed first (one small
// allreduce); a missing gradient then counts as zero, and a parameter no rank has a gradient for is skipped.
void DistributedDataParallel::synchronize_gradients() {
  NoGradGuard no_grad;
  std::vector<Tensor> parameters;
  for (const Tensor& parameter : model_->parameters())
    if (parameter.requires_grad()) parameters.push_back(parameter);
  std::vector<std::int64_t> flags(parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) flags[i] = parameters[i].grad().defined() ? 1 : 0;
  if (!flags.empty()) {
    Tensor counts = from_vector(flags, {static_cast<std::int64_t>(flags.size())});
    group_.allreduce(counts);
    const std::int64_t* any = counts.data<std::int64_t>();
    std::vector<Tensor> used;
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (any[i] > 0) used.push_back(parameters[i]);
    parameters = std::move(used);
  }

  const auto buckets = make_buckets(parameters, options_.bucket_bytes);
  last_bucket_count_ = buckets.size();
  for (const auto& bucket : buckets) {
    std::int64_t numel = 0;
    for (std::size_t i : bucket) numel += parameters[i].numel();
    const DType dtype = parameters[bucket.front()].dtype();
    Tensor flat = empty({numel}, dtype);
    char* cursor = static_cast<char*>(flat.raw_data());
    for (std::size_t i : bucket) {
      const Tensor grad = parameters[i].grad();
      const std::size_t bytes = bytes_of(parameters[i]);
      if (grad.defined()) {
        if (grad.dtype() != dtype || grad.numel() != parameters[i].numel())
          fail("DistributedDataParallel: gradient {} {} does not match its parameter {} {}", dtype_name(grad.dtype()),
               shape_string(grad.shape()), dtype_name(dtype), shape_string(parameters[i].shape()));
        std::memcpy(cursor, grad.raw_data(), bytes);
      } else {
        std::memset(cursor, 0, bytes);
      }
      cursor += bytes;
    }
    group_.allreduce(flat, ReduceOp::Mean);
    const char* source = static_cast<const char*>(flat.raw_data());
    for (std::size_t i : bucket) {
      Tensor averaged = empty(parameters[i].shape(), dtype);
      const std::size_t bytes = bytes_of(parameters[i]);
      std::memcpy(averaged.raw_data(), source, bytes);
      source += bytes;
      parameters[i].set_grad(averaged);
    }
  }
}

}  // namespace tapegrad::distributed
