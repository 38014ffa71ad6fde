#pragma once
/// The MPI process group: rank, world size and collectives (allreduce, broadcast, allgather) on tensors.
#include <tapegrad/export.h>
#include <functional>
#include <memory>
#include <vector>

#include <tapegrad/framework/tensor.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// How allreduce combines the ranks' values.
enum class ReduceOp { Sum, Mean };

/// A collective started by ProcessGroup::allreduce_async (libtorch's Work): its tensor must stay untouched
/// until the Work completes. A default-constructed Work is complete.
/// Note: Open MPI moves a nonblocking collective forward only inside MPI calls (it has no progress thread by
/// default), so a caller that computes while one is in flight calls test() now and then. MPI cannot cancel a
/// started collective: a Work destroyed before it completed leaves its tensor alive (leaked) for MPI to finish
/// writing, and the other ranks' matching collective is still owed.
class Work {
 public:
  Work() = default;
  /// Lets MPI progress once, without yielding the core (Open MPI); true when the collective has completed
  /// (the tensor then holds the result).
  bool test();
  /// Blocks until the collective has completed.
  void wait();
  /// True once test() or wait() saw the collective complete.
  bool is_completed() const;

  struct Impl;

 private:
  friend class ProcessGroup;
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

/// Note: MPI is one per process. The first ProcessGroup::world() initializes it from the environment mpirun or
/// mpiexec set up (MPI_Init_thread, MPI_THREAD_FUNNELED: OpenMP threads run inside ops, only the calling thread
/// talks to MPI), and it is finalized at exit; when the program initialized MPI itself, tapegrad leaves both to it.
/// A program started without mpirun is a world of one rank, where every collective is the identity.
/// Note: collectives work in place on contiguous float32, float64 or int64 tensors, must be called by every rank
/// in the same order, and (unless check_shapes is off) first exchange each rank's dtype and shape in one small
/// allgather, so a mismatch is a tapegrad::Error on every rank naming the op and each rank's shape, not a hang
/// or a silent overrun.
class ProcessGroup {
 public:
  /// Every process of the job (MPI_COMM_WORLD), initializing MPI on first use.
  static ProcessGroup world();

  /// This process's index, 0 .. world_size() - 1.
  int rank() const;
  /// Number of processes.
  int world_size() const;
  /// Waits until every rank has called it.
  void barrier() const;

  /// Replaces `tensor` by the sum (or mean) over ranks, on every rank. Mean needs a floating tensor.
  void allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  /// Replaces `tensor` on every rank by root's values (same shape and dtype everywhere).
  void broadcast(Tensor& tensor, int root = 0) const;
  /// Every rank's `tensor`, in rank order (same shape and dtype everywhere).
  std::vector<Tensor> allgather(const Tensor& tensor) const;
  /// Starts replacing the contiguous float32/float64/int64 `tensor` by its sum over ranks (MPI_Iallreduce, in
  /// place) and returns at once; the result is there when the Work completes. The shape check, being a
  /// blocking exchange, is not made: every rank must pass the same dtype and element count.
  /// Note: in place, Open MPI 4.1's libnbc sums with its binomial tree whatever the element count, so each
  /// element's sum is associated the same way however tensors are grouped into calls (DDP's buckets rely on it).
  Work allreduce_async(Tensor& tensor) const;

  /// A group of the same ranks with its own MPI communicator (MPI_Comm_dup; every rank must call it): its
  /// collectives never match another group's, so they may be in flight while the original group's run (DDP's
  /// gradient buckets while SyncBatchNorm communicates). Freed with the last copy of the returned group.
  ProcessGroup duplicate() const;

  /// Exchange dtype and shape before each collective (one extra small message; on by default).
  void set_check_shapes(bool check) { check_shapes_ = check; }
  bool check_shapes() const { return check_shapes_; }

  struct Impl;

 private:
  explicit ProcessGroup(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  void check_same_layout(const Tensor& tensor, const char* op) const;
  std::shared_ptr<const Impl> impl_;
  bool check_shapes_ = true;
};

/// Runs `fn` and returns 0. If it throws, prints "tapegrad: rank R of W failed: <what>; aborting every rank"
/// to stderr and calls MPI_Abort, so the other ranks, possibly waiting in a collective, are stopped instead of
/// hanging. Wrap a distributed program's main body in it.
int run_or_abort(const std::function<void()>& fn);

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
