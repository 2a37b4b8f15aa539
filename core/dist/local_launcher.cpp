#include "core/dist/local_launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <sstream>
#include <vector>

#include "core/util/strings.h"

extern char** environ;

namespace grpo::core::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kKillAfterTermS = 10.0;
constexpr long kPollIntervalNs = 50L * 1000 * 1000;

// Set by the handlers, read by the wait loop: a handler may only touch sig_atomic_t.
volatile std::sig_atomic_t g_got_sigint = 0;
volatile std::sig_atomic_t g_got_sigterm = 0;

extern "C" void remember_signal(int sig) {
  if (sig == SIGINT) g_got_sigint = 1;
  if (sig == SIGTERM) g_got_sigterm = 1;
}

// Catches SIGINT/SIGTERM for the lifetime of the object and restores the previous dispositions after.
class SignalCatcher {
 public:
  SignalCatcher() {
    g_got_sigint = 0;
    g_got_sigterm = 0;
    struct sigaction action {};
    action.sa_handler = remember_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a signal should cut the poll sleep short
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalCatcher() { restore(); }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  // Async-signal-safe: also used in a forked child, so that it starts with the dispositions this process had
  // before the call (an ignored SIGINT stays ignored; a handler is reset by exec anyway).
  void restore() const {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

  // The signals received since the last call.
  std::vector<int> take() {
    std::vector<int> signals;
    if (g_got_sigint) {
      g_got_sigint = 0;
      signals.push_back(SIGINT);
    }
    if (g_got_sigterm) {
      g_got_sigterm = 0;
      signals.push_back(SIGTERM);
    }
    return signals;
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

void log_line(const std::string& text) {
  // One write per line so ranks' own output and ours do not interleave mid-line.
  std::cerr << ("grpo-run: " + text + "\n") << std::flush;
}

std::string errno_text(int err) { return std::strerror(err); }

struct Rank {
  pid_t pid = -1;
  bool running = false;
  bool terminated = false;  // we sent it SIGTERM/SIGKILL, so its death is not news
  int code = 0;             // exit status, or 128 + signal
};

// Exit status as a shell reports it.
int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string status_text(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + "), status " +
           std::to_string(128 + sig);
  }
  return "failed with exit status " + std::to_string(status_code(status));
}

std::vector<std::string> live_rank_numbers(const std::vector<Rank>& ranks) {
  std::vector<std::string> numbers;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].running) numbers.push_back(std::to_string(r));
  }
  return numbers;
}

void signal_live(std::vector<Rank>& ranks, int sig, bool mark_terminated) {
  for (Rank& rank : ranks) {
    if (!rank.running) continue;
    kill(rank.pid, sig);
    if (mark_terminated) rank.terminated = true;
  }
}

// For the error path: nothing may be left behind when the launch itself failed.
void kill_and_reap(std::vector<Rank>& ranks) {
  for (Rank& rank : ranks) {
    if (!rank.running) continue;
    kill(rank.pid, SIGKILL);
    while (waitpid(rank.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
  }
}

// The environment of this process with the rendezvous variables replaced; built before fork because only
// async-signal-safe calls are allowed between fork and exec in a multi-threaded process (setenv is not).
std::vector<std::string> rank_environment(int rank, const LocalLaunchOptions& options, int port) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(options.nproc)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"GRPO_LOCAL_LAUNCH", "1"},
  };
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    bool replaced = false;
    for (const auto& [name, value] : ours) replaced = replaced || starts_with(text, name + "=");
    if (!replaced) env.emplace_back(text);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Forks and execs one rank. A close-on-exec pipe tells the parent whether exec succeeded: it is closed by a
// successful exec (EOF), or receives errno from a failed one. Returns the pid; throws when it cannot start.
pid_t start_rank(int rank, std::vector<std::string> argv, std::vector<std::string> env,
                 const SignalCatcher& signals) {
  std::vector<char*> argv_c = c_strings(argv);
  std::vector<char*> env_c = c_strings(env);
  const std::string exec_failed = "grpo-run: rank " + std::to_string(rank) + ": cannot execute '" + argv[0] + "'\n";
  const std::string orphaned = "grpo-run: rank " + std::to_string(rank) + ": the launcher exited before the rank started\n";
  const pid_t launcher = getpid();

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    throw std::runtime_error("cannot start rank " + std::to_string(rank) + ": pipe: " + errno_text(err));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    throw std::runtime_error("cannot start rank " + std::to_string(rank) + ": fork: " + errno_text(err));
  }
  if (pid == 0) {
    signals.restore();
    close(pipe_fds[0]);
    // The rank dies with the launcher: nobody else would stop it, and it would train on under init. SIGKILL,
    // because the launcher that escalates SIGTERM to SIGKILL is gone, and a rank may ignore SIGTERM. The
    // death signal survives execve (the rank is not set-uid). If the launcher died before prctl, the signal
    // will never come: the rank has been re-parented already, which getppid() shows.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) {
      (void)!write(STDERR_FILENO, orphaned.data(), orphaned.size());
      _exit(128 + SIGKILL);
    }
    execve(argv_c[0], argv_c.data(), env_c.data());
    const int err = errno;
    (void)!write(pipe_fds[1], &err, sizeof err);
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  close(pipe_fds[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(pipe_fds[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n > 0) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw std::runtime_error("cannot start rank " + std::to_string(rank) + ": cannot execute '" + argv[0] +
                             "': " + errno_text(child_errno));
  }
  return pid;
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

void check_options(const std::vector<std::string>& argv, const LocalLaunchOptions& options) {
  if (options.nproc < 1) {
    throw std::runtime_error("--nproc " + std::to_string(options.nproc) + ": expected at least 1");
  }
  if (argv.empty() || argv[0].empty()) throw std::runtime_error("no program to launch");
  if (options.master_port < 0 || options.master_port > 65535) {
    throw std::runtime_error("master port " + std::to_string(options.master_port) +
                             ": expected 0 (pick a free one) or a port in 1..65535");
  }
  if (!(options.grace_s >= 0) || !std::isfinite(options.grace_s)) {
    throw std::runtime_error("grace period " + seconds_text(options.grace_s) +
                             " s: expected a finite number >= 0");
  }
  if (options.master_addr.empty()) throw std::runtime_error("empty master address");
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int launch_local_ranks(const std::vector<std::string>& argv, const LocalLaunchOptions& options) {
  check_options(argv, options);
  const int port = options.master_port != 0 ? options.master_port : pick_free_port(options.master_addr);

  // Before the first fork, so a Ctrl-C that lands while ranks are starting is forwarded rather than lost.
  SignalCatcher signals;
  std::vector<Rank> ranks(static_cast<std::size_t>(options.nproc));
  for (int r = 0; r < options.nproc; ++r) {
    try {
      ranks[r].pid = start_rank(r, argv, rank_environment(r, options, port), signals);
      ranks[r].running = true;
    } catch (...) {
      kill_and_reap(ranks);
      throw;
    }
  }

  int first_failed = -1;
  int result = 0;
  std::optional<Clock::time_point> failed_at, term_sent_at;
  bool kill_sent = false;
  while (true) {
    for (int sig : signals.take()) signal_live(ranks, sig, false);

    for (std::size_t r = 0; r < ranks.size(); ++r) {
      Rank& rank = ranks[r];
      if (!rank.running) continue;
      int status = 0;
      const pid_t got = waitpid(rank.pid, &status, WNOHANG);
      const int wait_errno = errno;
      if (got == 0 || (got < 0 && wait_errno == EINTR)) continue;
      rank.running = false;
      if (got < 0) {
        // Someone else reaped it (ECHILD): its status is lost, which must not pass for success.
        rank.code = 1;
        log_line("rank " + std::to_string(r) + ": lost track of process " + std::to_string(rank.pid) + " (" +
                 errno_text(wait_errno) + ")");
      } else {
        rank.code = status_code(status);
        if (rank.code != 0 && !rank.terminated) log_line("rank " + std::to_string(r) + " " + status_text(status));
      }
      if (rank.code != 0 && first_failed < 0) {
        first_failed = static_cast<int>(r);
        result = rank.code;
        failed_at = Clock::now();
      }
    }

    const std::vector<std::string> live = live_rank_numbers(ranks);
    if (live.empty()) break;

    if (failed_at && !term_sent_at && seconds_since(*failed_at) >= options.grace_s) {
      log_line("terminating rank" + std::string(live.size() > 1 ? "s " : " ") + join(live, ", ") +
               " (still running " + seconds_text(options.grace_s) + " s after rank " +
               std::to_string(first_failed) + " failed)");
      signal_live(ranks, SIGTERM, true);
      term_sent_at = Clock::now();
    } else if (term_sent_at && !kill_sent && seconds_since(*term_sent_at) >= kKillAfterTermS) {
      log_line("killing rank" + std::string(live.size() > 1 ? "s " : " ") + join(live, ", ") +
               " (still running 10 s after SIGTERM)");
      signal_live(ranks, SIGKILL, true);
      kill_sent = true;
    }
    // nanosleep rather than sleep_for, which resumes after EINTR: a signal should wake us to forward it.
    timespec pause{0, kPollIntervalNs};
    nanosleep(&pause, nullptr);
  }
  return result;
}

int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &found); rc != 0) {
    throw std::runtime_error("cannot pick a free port on '" + addr + "': " + gai_strerror(rc));
  }
  std::string last_error = "no address";
  int port = 0;
  for (addrinfo* a = found; a && port == 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    // The resolved address carries port 0, so bind() lets the kernel choose.
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      last_error = errno_text(errno);
    } else if (bound.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else if (bound.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (port == 0) throw std::runtime_error("cannot pick a free port on '" + addr + "': " + last_error);
  return port;
}

}  // namespace grpo::core::dist
