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
