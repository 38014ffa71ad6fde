// The gradient reducer: PyTorch's bucket assignment, and bucket allreduces started during backward as soon as
// their gradients are final (told by the tape's BackwardObserver), waited for at the end of the pass.
#include <tapegrad/framework/distributed/reducer.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad::distributed {

namespace {

std::size_t bytes_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()) * element_size(t.dtype()); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool same_tensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].impl() != b[i].impl()) return false;
  return true;
}

}  // namespace

std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                        const std::vector<std::size_t>& size_limits) {
  if (size_limits.empty()) fail("compute_bucket_assignment_by_size: no size limits given");
  struct Open {
    std::vector<std::size_t> indices;
    std::size_t bytes = 0;
    std::size_t limit = 0;  // position in size_limits
  };
  std::map<DType, Open> open;
  std::vector<std::vector<std::size_t>> buckets;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].check_defined("compute_bucket_assignment_by_size");
    Open& bucket = open[tensors[i].dtype()];
    bucket.indices.push_back(i);
    bucket.bytes += bytes_of(tensors[i]);
    if (bucket.bytes >= size_limits[bucket.limit]) {
      buckets.push_back(std::move(bucket.indices));
      bucket.indices.clear();
      bucket.bytes = 0;
      bucket.limit = std::min(bucket.limit + 1, size_limits.size() - 1);
    }
  }
  for (auto& [dtype, bucket] : open)
    if (!bucket.indices.empty()) buckets.push_back(std::move(bucket.indices));
  std::sort(buckets.begin(), buckets.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return buckets;
}

struct Reducer::Bucket {
  std::vector<std::size_t> members;     // parameter indices
  std::vector<std::int64_t> offsets;    // element offset of each member's gradient in `flat`
  std::int64_t flags = 0;               // element offset of the has-gradient flags, one per member
  Tensor flat;                          // gradients, then flags; what the allreduce sums
  std::size_t pending = 0;              // members not final yet in this pass
  Work work;
};

std::shared_ptr<Reducer> Reducer::create(ProcessGroup group, ReducerOptions options) {
  if (options.bucket_bytes == 0 || options.first_bucket_bytes == 0)
    fail("Reducer: bucket_bytes ({}) and first_bucket_bytes ({}) must be positive", options.bucket_bytes,
         options.first_bucket_bytes);
  return std::shared_ptr<Reducer>(new Reducer(std::move(group), options));
}

Reducer::Reducer(ProcessGroup group, ReducerOptions options) : group_(std::move(group)), options_(options) {}

Reducer::~Reducer() { autograd::cancel_observation(this); }

std::vector<std::size_t> Reducer::bucket_bytes() const {
  std::vector<std::size_t> sizes;
  for (const auto& bucket : buckets_) sizes.push_back(bytes_of(bucket->flat));
  return sizes;
}

// Note: PyTorch's layout: buckets assigned in registration order with the small first limit (the parameters
// registered first, whose gradients come last, so the tail left after backward is short), then reversed.
void Reducer::plan(const std::vector<Tensor>& parameters) {
  if (same_tensors(parameters, parameters_) && !buckets_.empty()) return;
  if (parameters.empty()) {
    parameters_.clear();
    buckets_.clear();
    return;
  }
  const std::size_t first = std::min(options_.first_bucket_bytes, options_.bucket_bytes);
  auto assignment = compute_bucket_assignment_by_size(parameters, {first, options_.bucket_bytes});
  std::reverse(assignment.begin(), assignment.end());
  parameters_ = parameters;
  buckets_.clear();
  bucket_of_.assign(parameters.size(), 0);
  slot_of_.assign(parameters.size(), 0);
  std::vector<std::int64_t> layout{static_cast<std::int64_t>(assignment.size())};
  for (std::size_t b = 0; b < assignment.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->members = assignment[b];
    std::int64_t numel = 0;
    for (std::size_t slot = 0; slot < bucket->members.size(); ++slot) {
      const std::size_t i = bucket->members[slot];
      bucket_of_[i] = b;
      slot_of_[i] = slot;
      bucket->offsets.push_back(numel);
      numel += parameters[i].numel();
    }
    bucket->flags = numel;
    const DType dtype = parameters[bucket->members.front()].dtype();
    bucket->flat = empty({numel + static_cast<std::int64_t>(bucket->members.size())}, dtype);
    layout.push_back(static_cast<std::int64_t>(dtype));
    layout.push_back(bucket->flat.numel());
    buckets_.push_back(std::move(bucket));
  }
  // Every rank must start allreduces of the same sizes in the same order; check it once per layout (blocking).
  const Tensor mine = from_vector(layout, {static_cast<std::int64_t>(layout.size())});
  for (const Tensor& other : group_.allgather(mine))
    if (other.to_vector() != mine.to_vector())
      fail("DistributedDataParallel: the ranks' gradient buckets differ (different parameters, or parameters "
           "requiring grad, on different ranks)");
}

void Reducer::pack(std::size_t parameter) {
  const Tensor& p = parameters_[parameter];
  Bucket& bucket = *buckets_[bucket_of_[parameter]];
  const std::size_t slot = slot_of_[parameter];
  const DType dtype = bucket.flat.dtype();
  char* base = static_cast<char*>(bucket.flat.raw_data());
  const std::size_t element = element_size(dtype);
  char* target = base + static_cast<std::size_t>(bucket.offsets[slot]) * element;
  char* flag = base + static_cast<std::size_t>(bucket.flags + static_cast<std::int64_t>(slot)) * element;
  const Tensor grad = p.grad();
  const bool has = grad.defined();
  if (has) {
    if (grad.dtype() != dtype || grad.numel() != p.numel())
      fail("DistributedDataParallel: gradient {} {} does not match its parameter {} {}", dtype_name(grad.dtype()),
           shape_string(grad.shape()), dtype_name(dtype), shape_string(p.shape()));
    std::memcpy(target, grad.contiguous().raw_data(), bytes_of(p));
  } else {
    std::memset(target, 0, bytes_of(p));
  }
  if (dtype == DType::Float32) {
    const float one = has ? 1.0f : 0.0f;
    std::memcpy(flag, &one, sizeof one);
  } else {
    const double one = has ? 1.0 : 0.0;
    std::memcpy(flag, &one, sizeof one);
  }
}

void Reducer::start_ready_buckets() {
  while (next_start_ < buckets_.size() && buckets_[next_start_]->pending == 0) {
    Bucket& bucket = *buckets_[next_start_++];
    bucket.work = group_.allreduce_async(bucket.flat);
    ++statistics_.buckets;
    ++started_since_record_;
  }
}

// Waits for every bucket, averages and writes the gradients: the same for both modes.
void Reducer::finish() {
  NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) bucket->work.wait();
  statistics_.wait_seconds += seconds_since(start);
  const int ranks = group_.world_size();
  written_.assign(parameters_.size(), Tensor());
  written_versions_.assign(parameters_.size(), 0);
  for (auto& bucket : buckets_) {
    if (ranks > 1) bucket->flat.mul_(1.0 / static_cast<double>(ranks));
    const char* base = static_cast<const char*>(bucket->flat.raw_data());
    const bool single = bucket->flat.dtype() == DType::Float32;
    for (std::size_t slot = 0; slot < bucket->members.size(); ++slot) {
      const std::int64_t flag = bucket->flags + static_cast<std::int64_t>(slot);
      const double any = single ? bucket->flat.data<float>()[flag] : bucket->flat.data<double>()[flag];
      if (any == 0.0) continue;  // no rank had a gradient: it keeps none
      const std::size_t i = bucket->members[slot];
      Tensor averaged = empty(parameters_[i].shape(), bucket->flat.dtype());
      std::memcpy(averaged.raw_data(), base + static_cast<std::size_t>(bucket->offsets[slot]) * element_size(averaged.dtype()),
                  bytes_of(averaged));
      parameters_[i].set_grad(averaged);
      written_[i] = averaged;
      written_versions_[i] = averaged.version();
    }
  }
  last_bucket_count_ = buckets_.size();
  ++statistics_.reductions;
}

void Reducer::reduce_now() {
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < parameters_.size(); ++i) pack(i);
  for (auto& bucket : buckets_) bucket->pending = 0;
  next_start_ = 0;
  start_ready_buckets();
  finish();
  statistics_.exposed_seconds += seconds_since(start);
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& parameters) {
  if (!options_.overlap) return;
  if (state_ == State::Broken)
    fail("DistributedDataParallel: a backward pass failed while gradient allreduces were in flight; the ranks are "
         "out of step (wrap the program in run_or_abort)");
  if (state_ == State::InBackward) fail("DistributedDataParallel: forward called during backward");
  plan(parameters);
  state_ = State::Armed;
  autograd::observe_next_backward(shared_from_this());
}

void Reducer::synchronize(const std::vector<Tensor>& parameters) {
  switch (state_) {
    case State::Broken:
      fail("DistributedDataParallel: a backward pass failed while gradient allreduces were in flight; the ranks "
           "are out of step (wrap the program in run_or_abort)");
    case State::InBackward:
      fail("DistributedDataParallel: synchronize_gradients called during backward");
    case State::Reduced: {
      state_ = State::Idle;
      // Note: a second backward (retain_graph) without a DDP forward before it, or a write to .grad, would
      // otherwise leave local gradients un-averaged and the replicas drifting apart.
      for (std::size_t i = 0; i < parameters_.size(); ++i) {
        const Tensor now = parameters_[i].grad();
        if (now.impl() != written_[i].impl() || (now.defined() && now.version() != written_versions_[i]))
          fail("DistributedDataParallel: a gradient changed after backward averaged it (a second backward without "
               "a DistributedDataParallel forward before it, or an in-place change to .grad); to accumulate "
               "gradients over several backward passes, run the earlier ones under no_sync()");
      }
      if (!same_tensors(parameters, parameters_))
        fail("DistributedDataParallel: the parameters requiring grad changed between forward and synchronize_gradients");
      return;
    }
    case State::Armed:
      autograd::cancel_observation(this);
      break;
    case State::Idle:
    case State::Declined:
      break;
  }
  state_ = State::Idle;
  plan(parameters);
  if (!parameters_.empty()) reduce_now();
}

const std::vector<Tensor>& Reducer::on_backward_begin(const autograd::BackwardPass& pass) {
  if (state_ != State::Armed) return empty_;
  // Note: under create_graph the gradients carry history that an allreduce would cut; such a pass is left
  // alone and synchronize_gradients() averages after it, as without overlap.
  if (pass.create_graph || parameters_.empty()) {
    state_ = State::Declined;
    return empty_;
  }
  for (auto& bucket : buckets_) {
    bucket->pending = bucket->members.size();
    bucket->work = Work();
  }
  next_start_ = next_test_ = 0;
  started_since_record_ = started_before_record_ = 0;
  state_ = State::InBackward;
  return parameters_;
}

void Reducer::on_gradient_ready(std::size_t index) {
  if (state_ != State::InBackward) return;
  const auto start = std::chrono::steady_clock::now();
  pack(index);
  --buckets_[bucket_of_[index]]->pending;
  start_ready_buckets();
  statistics_.hook_seconds += seconds_since(start);
}

// Note: Open MPI's nonblocking collectives advance only inside MPI calls. One MPI_Test between records (on
// the oldest bucket in flight; any MPI call advances them all) lets each step of the allreduce's tree go out
// while backward computes; it costs about a microsecond, against records that take tens to thousands.
void Reducer::on_record_done() {
  if (state_ != State::InBackward) return;
  // Note: the tape reports the leaves a record made final just before this call; buckets they started count as
  // early only once another record runs after them.
  statistics_.buckets_started_early += started_before_record_;
  started_before_record_ = started_since_record_;
  started_since_record_ = 0;
  if (next_test_ == next_start_) return;
  const auto start = std::chrono::steady_clock::now();
  while (next_test_ < next_start_ && buckets_[next_test_]->work.test()) ++next_test_;
  const double spent = seconds_since(start);
  statistics_.progress_seconds += spent;
  statistics_.hook_seconds += spent;
}

void Reducer::on_backward_end(bool completed) {
  if (state_ != State::InBackward) return;
  if (!completed) {
    // Note: started allreduces cannot be cancelled, and the other ranks may be waiting in them; their buffers
    // stay alive (the Work objects) and this reducer refuses further use.
    state_ = next_start_ > 0 ? State::Broken : State::Idle;
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (next_start_ != buckets_.size())
    fail("DistributedDataParallel: backward ended with {} of {} gradient buckets not started", buckets_.size() - next_start_,
         buckets_.size());
  finish();
  ++statistics_.overlapped;
  state_ = State::Reduced;
  statistics_.exposed_seconds += seconds_since(start);
}

}  // namespace tapegrad::distributed
