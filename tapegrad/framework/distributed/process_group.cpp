// The MPI process group: initialization and finalization, and the tensor collectives.
#include <tapegrad/framework/distributed/process_group.h>

#include <dlfcn.h>
#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include <tapegrad/framework/detail/tensor_impl.h>
#include <tapegrad/framework/distributed/detail/comm_profile.h>
#include <tapegrad/framework/autograd/grad_mode.h>

namespace tapegrad::distributed {

struct ProcessGroup::Impl {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int size = 1;
  bool owned = false;  // made by duplicate(): freed here, unless MPI is already finalized (a group kept past exit)

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned && !finalized) MPI_Comm_free(&comm);
  }
};

struct Work::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor tensor;  // kept alive while MPI may write it
  bool completed = false;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  // Note: MPI cannot cancel a nonblocking collective, and freeing its buffer would let MPI write into freed
  // memory; an abandoned one keeps its tensor for the life of the process.
  ~Impl() {
    if (completed || request == MPI_REQUEST_NULL) return;
    static auto* abandoned = new std::vector<Tensor>;
    abandoned->push_back(std::move(tensor));
  }
};

namespace {

// Note: finalizes MPI at exit only when tapegrad initialized it. A function-local static, because MPI is
// process-global state by nature; nothing else in tapegrad is.
class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Note: Open MPI busy-polls while a rank waits in a collective. When the ranks share their cores with
      // other processes, a spinning rank uses up its time slice and then waits behind them for the core when
      // the message it waits for arrives. Yielding while idle gave SyncBatchNorm's DDP step (four collectives
      // spread over forward and backward) 1.34x the throughput on a 2-core machine at load 13-16, median of 3
      // interleaved runs; plain BatchNorm's (its collectives back to back) was unchanged within noise.
      // Without competition sched_yield returns at once. A value set by the user (environment or mpirun --mca)
      // wins; other MPI implementations ignore the variable.
      setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owner_ = true;
    }
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && !finalized) {
      detail::comm_profile_report();
      MPI_Finalize();
    }
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owner_ = false;
};

// Runs fn (one MPI call) as a span of the communication profile, labelled "<current label> <op>".
template <class Fn>
int timed(const char* op, Fn fn, detail::SpanKind kind = detail::SpanKind::Collective) {
  if (!detail::comm_profile_on()) return fn();
  const std::string& context = detail::comm_profile_label();
  const std::string label = context.empty() ? std::string(op) : context + " " + op;
  detail::CommSpan span(label, kind);
  return fn();
}

void check(int status, const char* op) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  fail("{}: MPI error: {}", op, std::string(text, static_cast<std::size_t>(length)));
}

MPI_Datatype mpi_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::BFloat16: break;  // Note: MPI has no bfloat16 type to reduce; parameters and gradients stay float32.
  }
  fail("{}: unsupported dtype {}", op, dtype_name(dtype));
}

int count_of(const Tensor& tensor, const char* op) {
  if (tensor.numel() > std::numeric_limits<int>::max())
    fail("{}: tensor {} has more than 2^31 - 1 elements (split it)", op, shape_string(tensor.shape()));
  return static_cast<int>(tensor.numel());
}

// Note: a collective writes the storage directly, so it bumps the version like every in-place op; a
// backward that saved this tensor then refuses to use the changed values.
void prepare_in_place(Tensor& tensor, const char* op) {
  tensor.check_defined(op);
  if (tensor.requires_grad() && is_grad_enabled())
    fail("{}: in-place collective on a tensor that requires grad while grad mode is on (use NoGradGuard)", op);
  tensor.impl()->storage->bump_version();
}

constexpr int kMaxLayoutDims = 8;
// dtype, dim, then up to kMaxLayoutDims extents.
using Layout = std::array<std::int64_t, 2 + kMaxLayoutDims>;

Layout layout_of(const Tensor& tensor) {
  Layout layout{};
  layout.fill(-1);
  layout[0] = static_cast<std::int64_t>(tensor.dtype());
  layout[1] = tensor.dim();
  for (std::int64_t d = 0; d < tensor.dim() && d < kMaxLayoutDims; ++d) layout[2 + d] = tensor.size(d);
  return layout;
}

std::string describe(const Layout& layout) {
  std::string dims;
  for (std::int64_t d = 0; d < layout[1] && d < kMaxLayoutDims; ++d)
    dims += (d ? ", " : "") + std::to_string(layout[2 + d]);
  return fmt::format("{} [{}]", dtype_name(static_cast<DType>(layout[0])), dims);
}

}  // namespace

ProcessGroup ProcessGroup::world() {
  static MpiSession session;
  auto impl = std::make_shared<Impl>();
  check(MPI_Comm_rank(impl->comm, &impl->rank), "ProcessGroup::world");
  check(MPI_Comm_size(impl->comm, &impl->size), "ProcessGroup::world");
  return ProcessGroup(std::move(impl));
}

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::world_size() const { return impl_->size; }
void ProcessGroup::barrier() const {
  check(timed("barrier", [&] { return MPI_Barrier(impl_->comm); }), "barrier");
}

void ProcessGroup::check_same_layout(const Tensor& tensor, const char* op) const {
  if (!check_shapes_ || impl_->size == 1) return;
  const Layout mine = layout_of(tensor);
  std::vector<Layout> all(static_cast<std::size_t>(impl_->size));
  check(timed("shape check", [&] {
          return MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                               static_cast<int>(mine.size()), MPI_INT64_T, impl_->comm);
        }),
        op);
  bool same = true;
  for (const Layout& other : all) same = same && other == all[0];
  if (same) return;
  std::string ranks;
  for (std::size_t r = 0; r < all.size(); ++r) ranks += fmt::format("{}rank {}: {}", r ? ", " : "", r, describe(all[r]));
  fail("{}: every rank must pass the same dtype and shape, got {}", op, ranks);
}

void ProcessGroup::allreduce(Tensor& tensor, ReduceOp op) const {
  const char* name = "allreduce";
  tensor.check_defined(name);
  const MPI_Datatype type = mpi_type(tensor.dtype(), name);
  if (op == ReduceOp::Mean && !is_floating(tensor.dtype()))
    fail("allreduce: mean needs a float32 or float64 tensor, got {} {}", dtype_name(tensor.dtype()),
         shape_string(tensor.shape()));
  check_same_layout(tensor, name);
  prepare_in_place(tensor, name);
  if (impl_->size == 1) return;
  const int count = count_of(tensor, name);
  check(timed(name, [&] { return MPI_Allreduce(MPI_IN_PLACE, tensor.raw_data(), count, type, MPI_SUM, impl_->comm); }),
        name);
  if (op == ReduceOp::Mean) {
    NoGradGuard no_grad;
    tensor.mul_(1.0 / static_cast<double>(impl_->size));
  }
}

void ProcessGroup::broadcast(Tensor& tensor, int root) const {
  const char* name = "broadcast";
  tensor.check_defined(name);
  if (root < 0 || root >= impl_->size) fail("broadcast: root {} is not a rank of a world of {}", root, impl_->size);
  const MPI_Datatype type = mpi_type(tensor.dtype(), name);
  check_same_layout(tensor, name);
  prepare_in_place(tensor, name);
  if (impl_->size == 1) return;
  const int count = count_of(tensor, name);
  check(timed(name, [&] { return MPI_Bcast(tensor.raw_data(), count, type, root, impl_->comm); }), name);
}

std::vector<Tensor> ProcessGroup::allgather(const Tensor& tensor) const {
  const char* name = "allgather";
  tensor.check_defined(name);
  const MPI_Datatype type = mpi_type(tensor.dtype(), name);
  check_same_layout(tensor, name);
  const int count = count_of(tensor, name);
  Shape gathered_shape = tensor.shape();
  gathered_shape.insert(gathered_shape.begin(), impl_->size);
  Tensor gathered = empty(gathered_shape, tensor.dtype());
  check(timed(name, [&] { return MPI_Allgather(tensor.raw_data(), count, type, gathered.raw_data(), count, type, impl_->comm); }),
        name);
  std::vector<Tensor> out;
  const std::size_t bytes = static_cast<std::size_t>(tensor.numel()) * element_size(tensor.dtype());
  for (int r = 0; r < impl_->size; ++r) {
    Tensor part = empty(tensor.shape(), tensor.dtype());
    std::memcpy(part.raw_data(), static_cast<const char*>(gathered.raw_data()) + bytes * static_cast<std::size_t>(r), bytes);
    out.push_back(part);
  }
  return out;
}

Work ProcessGroup::allreduce_async(Tensor& tensor) const {
  const char* name = "allreduce_async";
  tensor.check_defined(name);
  const MPI_Datatype type = mpi_type(tensor.dtype(), name);
  if (!tensor.is_contiguous())
    fail("allreduce_async: the tensor {} must be contiguous (MPI writes it as one array)", shape_string(tensor.shape()));
  prepare_in_place(tensor, name);
  auto work = std::make_shared<Work::Impl>();
  if (impl_->size == 1) {
    work->completed = true;
    return Work(std::move(work));
  }
  work->tensor = tensor;
  check(MPI_Iallreduce(MPI_IN_PLACE, tensor.raw_data(), count_of(tensor, name), type, MPI_SUM, impl_->comm,
                       &work->request),
        name);
  return Work(std::move(work));
}

ProcessGroup ProcessGroup::duplicate() const {
  auto impl = std::make_shared<Impl>();
  check(MPI_Comm_dup(impl_->comm, &impl->comm), "duplicate");
  impl->owned = true;
  impl->rank = impl_->rank;
  impl->size = impl_->size;
  ProcessGroup group(std::move(impl));
  group.check_shapes_ = check_shapes_;
  return group;
}

// Note: with mpi_yield_when_idle (set above for the waits), every Open MPI progress call that finds nothing
// to do calls sched_yield. A wait is better off yielding, but a test between two pieces of work should not:
// on a machine shared with other processes each such yield gave the core away for about 10 ms (measured:
// fashion_mnist_ddp at load 12-15, 10-36 ms per step spent in MPI_Test between backward's records). So test()
// switches the yield off around its MPI_Test, through Open MPI's own (exported) setter when the library has
// it; other MPI implementations are left as they are.
namespace {
using SetYield = bool (*)(bool);
SetYield open_mpi_set_yield() {
  static const SetYield setter = [] {
    void* symbol = dlsym(RTLD_DEFAULT, "opal_progress_set_yield_when_idle");
    SetYield function = nullptr;
    static_assert(sizeof function == sizeof symbol);
    std::memcpy(&function, &symbol, sizeof function);  // a data pointer to a function pointer, without UB warnings
    return function;
  }();
  return setter;
}
}  // namespace

bool Work::test() {
  if (!impl_ || impl_->completed) return true;
  int done = 0;
  const SetYield set_yield = open_mpi_set_yield();
  const bool yielding = set_yield ? set_yield(false) : false;
  const int status =
      timed("Work::test", [&] { return MPI_Test(&impl_->request, &done, MPI_STATUS_IGNORE); }, detail::SpanKind::Local);
  if (set_yield) set_yield(yielding);
  check(status, "Work::test");
  if (done) {
    impl_->completed = true;
    impl_->tensor = Tensor();
  }
  return done != 0;
}

void Work::wait() {
  if (!impl_ || impl_->completed) return;
  check(timed("Work::wait", [&] { return MPI_Wait(&impl_->request, MPI_STATUS_IGNORE); }, detail::SpanKind::Local),
        "Work::wait");
  impl_->completed = true;
  impl_->tensor = Tensor();
}

bool Work::is_completed() const { return !impl_ || impl_->completed; }

int run_or_abort(const std::function<void()>& fn) {
  try {
    fn();
    return 0;
  } catch (const std::exception& error) {
    int initialized = 0, finalized = 0, rank = 0, size = 1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    std::fprintf(stderr, "tapegrad: rank %d of %d failed: %s; aborting every rank\n", rank, size, error.what());
    std::fflush(stderr);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace tapegrad::distributed
