// The communication profile of detail/comm_profile.h: recording, and the combined report at exit.
#include <tapegrad/framework/distributed/detail/comm_profile.h>

#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace tapegrad::distributed::detail {

namespace {

struct Record {
  std::int64_t start, end, cpu;
};

struct Series {
  SpanKind kind = SpanKind::Local;
  std::vector<Record> records;
};

// Note: leaked on purpose: the report runs from a static destructor (MPI's session), after which nothing records.
std::map<std::string, Series>& series() {
  static auto* all = new std::map<std::string, Series>;
  return *all;
}

thread_local std::string current_label;

std::int64_t read_clock(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

}  // namespace

bool comm_profile_on() {
  static const bool on = [] {
    const char* text = std::getenv("TAPEGRAD_COMM_PROFILE");
    return text && std::strcmp(text, "1") == 0;
  }();
  return on;
}

std::int64_t monotonic_ns() { return read_clock(CLOCK_MONOTONIC); }
std::int64_t thread_cpu_ns() { return read_clock(CLOCK_THREAD_CPUTIME_ID); }

void comm_profile_record(const std::string& label, SpanKind kind, std::int64_t start_ns, std::int64_t end_ns,
                         std::int64_t cpu_ns) {
  Series& s = series()[label];
  s.kind = kind;
  s.records.push_back({start_ns, end_ns, cpu_ns});
}

const std::string& comm_profile_label() { return current_label; }

CommLabel::CommLabel(std::string label) : previous_(std::move(current_label)) { current_label = std::move(label); }
CommLabel::~CommLabel() { current_label = std::move(previous_); }

void comm_profile_report() {
  if (!comm_profile_on()) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0's labels, in its order, are the ones reported (the ranks of one program make the same calls).
  std::string names;
  for (const auto& [label, s] : series()) names += label + '\n';
  int length = static_cast<int>(names.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  names.resize(static_cast<std::size_t>(length));
  MPI_Bcast(names.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);

  std::string text = fmt::format(
      "tapegrad comm profile, rank {} of {} (ms per call; wait: until the last rank entered the collective, "
      "after: from then to the return; cpu: this thread)\n{:<44} {:>6} {:>8} {:>8} {:>8} {:>8} {:>10}\n",
      rank, size, "label", "calls", "wall", "cpu", "wait", "after", "total ms");
  std::size_t begin = 0;
  while (begin < names.size()) {
    const std::size_t end = names.find('\n', begin);
    const std::string label = names.substr(begin, end - begin);
    begin = end + 1;
    const auto found = series().find(label);
    const Series empty_series;
    const Series& s = found == series().end() ? empty_series : found->second;
    int kind = static_cast<int>(s.kind), count = static_cast<int>(s.records.size());
    MPI_Bcast(&kind, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int common = count;
    MPI_Allreduce(MPI_IN_PLACE, &common, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    double wall = 0, cpu = 0, wait = 0, after = 0;
    for (const Record& r : s.records) {
      wall += static_cast<double>(r.end - r.start);
      cpu += static_cast<double>(r.cpu);
    }
    const bool collective = static_cast<SpanKind>(kind) == SpanKind::Collective;
    if (collective && common > 0) {
      std::vector<std::int64_t> last(static_cast<std::size_t>(common));
      for (int i = 0; i < common; ++i) last[static_cast<std::size_t>(i)] = s.records[static_cast<std::size_t>(i)].start;
      MPI_Allreduce(MPI_IN_PLACE, last.data(), common, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      for (int i = 0; i < common; ++i) {
        const Record& r = s.records[static_cast<std::size_t>(i)];
        const std::int64_t arrival = std::min(last[static_cast<std::size_t>(i)], r.end);
        wait += static_cast<double>(arrival - r.start);
        after += static_cast<double>(r.end - arrival);
      }
    }
    const double calls = count > 0 ? count : 1;
    const double per_common = common > 0 ? common : 1;
    text += fmt::format("{:<44} {:>6} {:>8.3f} {:>8.3f} ", label, count, wall / calls * 1e-6, cpu / calls * 1e-6);
    text += collective ? fmt::format("{:>8.3f} {:>8.3f} ", wait / per_common * 1e-6, after / per_common * 1e-6)
                       : fmt::format("{:>8} {:>8} ", "-", "-");
    text += fmt::format("{:>10.1f}\n", wall * 1e-6);
  }
  // Rank 0 prints every rank's table, in rank order, so they do not interleave.
  int bytes = static_cast<int>(text.size());
  std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += sizes[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(rank == 0 ? total : 0), '\0');
  MPI_Gatherv(text.data(), bytes, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::fwrite(all.data(), 1, all.size(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace tapegrad::distributed::detail
