#pragma once
// Runs one hostile load in a forked child, so that a crash, a hang or a runaway allocation is a failed check
// instead of a dead test program. The child (optionally on a thread with a small stack) builds the model, loads,
// and reports through a pipe: what happened (loaded, tapegrad::Error, another exception), the message, and whether
// the model is byte-identical after a refusal. The parent adds what only it can see: a signal (SIGALRM is the
// time limit), the child's peak RSS (wait4) and the wall time.
// Limits: in a release build the child runs under RLIMIT_AS = 1 GiB and a 10 s alarm. AddressSanitizer reserves
// terabytes of address space, so under it the child has no RLIMIT_AS; its peak RSS is checked instead (see
// kSanitized), with a 30 s alarm.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>

#include <tapegrad/tapegrad.h>

#if defined(__SANITIZE_ADDRESS__)
#define TAPEGRAD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TAPEGRAD_TEST_ASAN 1
#endif
#endif

namespace tapegrad::testing {

#ifdef TAPEGRAD_TEST_ASAN
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// How a child's load ended.
enum class Outcome { Loaded, Error, OtherException, Signal, NoReport };

inline const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Loaded: return "loaded";
    case Outcome::Error: return "tapegrad::Error";
    case Outcome::OtherException: return "another exception";
    case Outcome::Signal: return "killed by a signal";
    case Outcome::NoReport: return "exited without a report";
  }
  return "?";
}

struct ChildReport {
  Outcome outcome = Outcome::NoReport;
  std::string message;          // what() of the exception
  bool model_unchanged = true;  // after a refusal, the model's state is byte-identical to before
  int signal = 0;
  long growth_mib = 0;  // peak RSS during the load minus the RSS the child started with
  double seconds = 0;
  std::string describe() const {
    std::string s = std::string(outcome_name(outcome));
    if (outcome == Outcome::Signal)
      s += " " + std::to_string(signal) + (signal == SIGALRM ? " (SIGALRM: the time limit)" : "");
    return s + ", " + std::to_string(seconds).substr(0, 5) + " s, +" + std::to_string(growth_mib) + " MiB; message (" +
           std::to_string(message.size()) + " chars): " + escaped(message.substr(0, 600));
  }
  // Control bytes as \xNN, so that a message that holds them cannot garble the test's own output.
  static std::string escaped(const std::string& text) {
    std::string out;
    for (const char c : text)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
        out += hex;
      } else {
        out += c;
      }
    return out;
  }
};

/// The limits a child runs under.
struct ChildLimits {
  std::size_t stack_bytes = 0;  // run the load on a thread with this stack; 0: on the child's main thread
  unsigned alarm_seconds = kSanitized ? 30 : 10;
  std::uint64_t address_space = std::uint64_t{1} << 30;  // release builds only
};

namespace detail {

// The model the hostile files are loaded into: the fuzz targets' Sequential(Linear(4, 3), BatchNorm1d(3), Dropout).
inline std::shared_ptr<nn::Sequential> small_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), std::make_shared<nn::Dropout>(0.5)});
}

inline std::string state_bytes(const nn::Module& model) {
  std::string out;
  for (const auto& [name, t] : model.state()) {
    const Tensor c = t.contiguous();
    out += name + '\0';
    out.append(static_cast<const char*>(c.raw_data()), static_cast<std::size_t>(c.numel()) * element_size(c.dtype()));
  }
  return out;
}

struct ChildWork {
  const std::function<void(nn::Module&)>* load = nullptr;
  int outcome = static_cast<int>(Outcome::NoReport);
  bool unchanged = true;
  std::string message;
};

inline void* child_work(void* argument) {
  auto& work = *static_cast<ChildWork*>(argument);
  try {
    const auto model = small_model();
    const std::string before = state_bytes(*model);
    try {
      (*work.load)(*model);
      work.outcome = static_cast<int>(Outcome::Loaded);
    } catch (const Error& e) {
      work.outcome = static_cast<int>(Outcome::Error);
      work.message = e.what();
      work.unchanged = state_bytes(*model) == before;
    }
  } catch (const std::exception& e) {
    work.outcome = static_cast<int>(Outcome::OtherException);
    work.message = std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    work.outcome = static_cast<int>(Outcome::OtherException);
    work.message = "(not a std::exception)";
  }
  return nullptr;
}

inline void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

inline long peak_rss_kib_self() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace detail

/// Runs `load(model)` in a forked child under `limits`; the model is a fresh small_model(). The parent must not
/// have run tapegrad ops before (a forked child cannot use an OpenMP pool its parent started).
inline ChildReport run_isolated(const std::function<void(nn::Module&)>& load, const ChildLimits& limits = {}) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {Outcome::NoReport, "pipe failed"};
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    // Note: Catch2's handlers would report a crash of the child as the parent's test failing, and print its summary.
    for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM}) ::signal(sig, SIG_DFL);
    if (!kSanitized) {
      const rlimit space{limits.address_space, limits.address_space};
      ::setrlimit(RLIMIT_AS, &space);
    }
    ::alarm(limits.alarm_seconds);
    const long rss_before = detail::peak_rss_kib_self();
    detail::ChildWork work;
    work.load = &load;
    if (limits.stack_bytes == 0) {
      detail::child_work(&work);
    } else {
      pthread_attr_t attributes;
      pthread_t thread;
      pthread_attr_init(&attributes);
      pthread_attr_setstacksize(&attributes, limits.stack_bytes);
      if (pthread_create(&thread, &attributes, detail::child_work, &work) == 0)
        pthread_join(thread, nullptr);
      else
        work.message = "pthread_create failed";
    }
    detail::write_all(pipe_fds[1], std::to_string(work.outcome) + " " + std::to_string(work.unchanged ? 1 : 0) + " " +
                                       std::to_string(rss_before) + "\n" + work.message);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ChildReport report;
  if (pid < 0) {
    ::close(pipe_fds[0]);
    report.message = "fork failed";
    return report;
  }
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;)
    if (n > 0) text.append(buffer, static_cast<std::size_t>(n));
    else if (errno != EINTR) break;
  ::close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  long rss_before = usage.ru_maxrss;
  if (const std::size_t newline = text.find('\n'); newline != std::string::npos) {
    int outcome = 0, unchanged = 1;
    std::sscanf(text.c_str(), "%d %d %ld", &outcome, &unchanged, &rss_before);
    report.outcome = static_cast<Outcome>(outcome);
    report.model_unchanged = unchanged != 0;
    report.message = text.substr(newline + 1);
  }
  report.growth_mib = (usage.ru_maxrss - rss_before) / 1024;
  if (WIFSIGNALED(status)) {
    report.outcome = Outcome::Signal;
    report.signal = WTERMSIG(status);
  }
  return report;
}

}  // namespace tapegrad::testing
