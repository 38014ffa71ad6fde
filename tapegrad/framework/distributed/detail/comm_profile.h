#pragma once
// Internal: the communication profile (TAPEGRAD_COMM_PROFILE=1). Each blocking collective of a ProcessGroup, each
// Work::wait/test and each labelled local pass records its wall-clock span and this thread's CPU time; at exit
// (before MPI_Finalize, when tapegrad initialized MPI) the ranks combine their records and every rank prints,
// per label, the calls and the time per call, and for collectives how much of it was waiting for the last rank to
// arrive and how much was the collective itself after that.
// Note: the split uses CLOCK_MONOTONIC entry times compared across ranks, which is meaningful on one host only
// (every process reads the same clock); across hosts the wait/transfer columns are not printed.
// Cheap when off: one branch on a flag read once from the environment.
#include <cstdint>
#include <string>

namespace tapegrad::distributed::detail {

/// True when TAPEGRAD_COMM_PROFILE=1 (read once).
bool comm_profile_on();

/// Nanoseconds of CLOCK_MONOTONIC and of this thread's CPU clock.
std::int64_t monotonic_ns();
std::int64_t thread_cpu_ns();

enum class SpanKind { Collective, Local };

/// Records one span under `label` (collectives are matched across ranks by label and occurrence).
void comm_profile_record(const std::string& label, SpanKind kind, std::int64_t start_ns, std::int64_t end_ns,
                         std::int64_t cpu_ns);

/// The label the next collectives of this thread are recorded under (empty: the collective's own name).
const std::string& comm_profile_label();

/// Sets the label of this thread's collectives for its lifetime (restoring the previous one).
class CommLabel {
 public:
  explicit CommLabel(std::string label);
  ~CommLabel();
  CommLabel(const CommLabel&) = delete;
  CommLabel& operator=(const CommLabel&) = delete;

 private:
  std::string previous_;
};

/// Times its scope as one span (nothing when the profile is off).
class CommSpan {
 public:
  CommSpan(const std::string& label, SpanKind kind) : on_(comm_profile_on()) {
    if (!on_) return;
    label_ = &label;
    kind_ = kind;
    start_ = monotonic_ns();
    cpu_ = thread_cpu_ns();
  }
  ~CommSpan() {
    if (on_) comm_profile_record(*label_, kind_, start_, monotonic_ns(), thread_cpu_ns() - cpu_);
  }
  CommSpan(const CommSpan&) = delete;
  CommSpan& operator=(const CommSpan&) = delete;

 private:
  bool on_;
  const std::string* label_ = nullptr;
  SpanKind kind_ = SpanKind::Local;
  std::int64_t start_ = 0, cpu_ = 0;
};

/// Combines every rank's records and prints them to stderr (every rank, collectively; called at exit).
void comm_profile_report();

}  // namespace tapegrad::distributed::detail
