#pragma once
/// The gradient reducer behind DistributedDataParallel: buckets of gradients averaged over ranks, during backward.
#include <tapegrad/export.h>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <tapegrad/framework/autograd/backward_observer.h>
#include <tapegrad/framework/distributed/process_group.h>

TAPEGRAD_API_BEGIN

namespace tapegrad::distributed {

/// PyTorch's bucket assignment (torch.distributed._compute_bucket_assignment_by_size): walks `tensors` in order,
/// one open bucket per dtype, and closes a bucket once it holds at least its size limit in bytes; the first
/// bucket of each dtype gets size_limits[0], the next size_limits[1], and so on, the last limit repeating.
/// Returns the buckets as indices into `tensors`, ordered by their first index.
std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                        const std::vector<std::size_t>& size_limits);

/// How the reducer groups and schedules its allreduces (DataParallelOptions sets them).
struct ReducerOptions {
  std::size_t bucket_bytes = 25u << 20;
  std::size_t first_bucket_bytes = 1u << 20;
  bool overlap = true;
};

/// What the reductions cost, summed since construction or reset_statistics().
struct ReducerStatistics {
  std::size_t reductions = 0;             ///< gradient averagings (one per step)
  std::size_t overlapped = 0;             ///< of which ran during backward
  std::size_t buckets = 0;                ///< bucket allreduces started
  std::size_t buckets_started_early = 0;  ///< of which before the backward pass's last record had run
  double hook_seconds = 0;                ///< inside backward: copying gradients into buckets, starting, progressing
  double progress_seconds = 0;            ///< of which in MPI_Test between records
  double wait_seconds = 0;                ///< blocked in MPI after backward until every bucket was reduced
  double exposed_seconds = 0;             ///< the whole averaging time after backward (waits, copies, mean)
};

/// Note: the reducer keeps one flat buffer per bucket, laid out once per parameter list: each parameter's
/// gradient, then one has-gradient flag per parameter, all summed by one allreduce, so a parameter with a
/// gradient on some ranks only counts as zero on the others and one without a gradient on every rank keeps
/// none, without a separate exchange. Buckets are reduced in reverse registration order (the order backward
/// produces gradients, roughly), each started once all its gradients are final and every earlier bucket has
/// started, so every rank starts the same allreduces in the same order. Every allreduce, overlapped or not, is
/// the same in-place MPI_Iallreduce followed by the same multiplication by 1/world: the averaged gradients are
/// bit for bit the same in both modes, and with any bucket sizes (see ProcessGroup::allreduce_async).
class Reducer : public autograd::BackwardObserver, public std::enable_shared_from_this<Reducer> {
 public:
  /// `group` should be a communicator of the reducer's own (ProcessGroup::duplicate()).
  static std::shared_ptr<Reducer> create(ProcessGroup group, ReducerOptions options);

  /// With overlap on, arms the reducer for the calling thread's next backward over `parameters` (PyTorch's
  /// prepare_for_backward, done by DistributedDataParallel::forward); without, does nothing.
  void prepare_for_backward(const std::vector<Tensor>& parameters);
  /// Makes every gradient of `parameters` its mean over ranks: returns at once when the last backward pass
  /// already did (and nothing changed the gradients since), reduces now otherwise.
  void synchronize(const std::vector<Tensor>& parameters);

  /// Number of bucket allreduces the last averaging made.
  std::size_t last_bucket_count() const { return last_bucket_count_; }
  /// Bytes of each bucket's buffer (gradients plus flags), in reduction order.
  std::vector<std::size_t> bucket_bytes() const;
  const ReducerStatistics& statistics() const { return statistics_; }
  void reset_statistics() { statistics_ = ReducerStatistics{}; }
  const ReducerOptions& options() const { return options_; }

  const std::vector<Tensor>& on_backward_begin(const autograd::BackwardPass& pass) override;
  void on_gradient_ready(std::size_t index) override;
  void on_record_done() override;
  void on_backward_end(bool completed) override;

  ~Reducer() override;

 private:
  struct Bucket;
  enum class State { Idle, Armed, InBackward, Reduced, Declined, Broken };
  Reducer(ProcessGroup group, ReducerOptions options);
  void plan(const std::vector<Tensor>& parameters);
  void pack(std::size_t parameter);
  void start_ready_buckets();
  void finish();
  void reduce_now();

  ProcessGroup group_;
  ReducerOptions options_;
  std::vector<Tensor> parameters_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<std::size_t> slot_of_;    // its position in its bucket
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::size_t next_start_ = 0;  // first bucket not started
  std::size_t next_test_ = 0;   // first started bucket not seen complete
  State state_ = State::Idle;
  std::vector<Tensor> written_;  // the gradients the last averaging set, to notice a later change
  std::vector<std::uint64_t> written_versions_;
  std::vector<Tensor> empty_;
  std::size_t last_bucket_count_ = 0;
  std::size_t started_since_record_ = 0;   // buckets started since the last record ran
  std::size_t started_before_record_ = 0;  // buckets started just before it ran: early if another one runs
  ReducerStatistics statistics_;
};

}  // namespace tapegrad::distributed

TAPEGRAD_API_END
