#include "plugins/shared/sandbox/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

namespace grpo_sandbox {

struct Sandbox::State {
  std::mutex mutex;
  std::condition_variable freed;
  std::vector<bool> busy;
  std::vector<uid_t> uids;   // uid of each busy slot (root only)
  std::mt19937_64 rng{std::random_device{}()};
};

Sandbox::Sandbox(std::string bwrap, std::string python, unsigned slots, unsigned uid_base,
                 const CgroupSupport& cgroup)
    : bwrap_(std::move(bwrap)), python_(std::move(python)), slots_(slots ? slots : 1), uid_base_(uid_base),
      cgroup_(cgroup), state_(std::make_unique<State>()) {
  state_->busy.assign(slots_, false);
  state_->uids.assign(slots_, 0);
}

Sandbox::~Sandbox() = default;

unsigned Sandbox::acquire() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  for (;;) {
    for (unsigned i = 0; i < slots_; ++i)
      if (!state_->busy[i]) {
        state_->busy[i] = true;
        return i;
      }
    state_->freed.wait(lock);
  }
}

uid_t Sandbox::pick_uid(unsigned slot) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::uniform_int_distribution<unsigned> dist(0, kUidCount - 1);
  for (;;) {
    const uid_t uid = static_cast<uid_t>(uid_base_ + dist(state_->rng));
    bool taken = false;
    for (unsigned i = 0; i < slots_; ++i) taken = taken || (i != slot && state_->busy[i] && state_->uids[i] == uid);
    if (!taken) {
      state_->uids[slot] = uid;
      return uid;
    }
  }
}

void Sandbox::release(unsigned slot) const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->busy[slot] = false;
    state_->uids[slot] = 0;
  }
  state_->freed.notify_one();
}

namespace {

// Tasks (threads) of `uid` now: what RLIMIT_NPROC counts for a non-root user.
std::uint64_t tasks_of(uid_t uid) {
  std::uint64_t n = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    bool mine = false;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) mine = std::strtoul(line.c_str() + 4, nullptr, 10) == uid;
      if (line.rfind("Threads:", 0) == 0) {
        if (mine) n += std::strtoul(line.c_str() + 8, nullptr, 10);
        break;
      }
    }
  }
  closedir(d);
  return n;
}

int make_memfd(const std::string& content) {
  const int fd = static_cast<int>(syscall(SYS_memfd_create, "grpo_code", 0));
  if (fd < 0) return -1;
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<std::size_t>(w);
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

void set_limit(int resource, rlim_t value) {
  rlimit r{value, value};
  setrlimit(resource, &r);
}

// What the child reports through the status pipe when it fails before exec.
struct ChildFailure {
  char step;  // 'c' cgroup leaf, 'u' uid switch, 'x' exec
  int err;
};

void report_and_exit(int fd, char step) {
  const ChildFailure f{step, errno};
  (void)!write(fd, &f, sizeof f);
  _exit(127);
}

}  // namespace

SigpipeGuard::SigpipeGuard() {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  was_blocked_ = sigismember(&old, SIGPIPE) == 1;
}

SigpipeGuard::~SigpipeGuard() {
  if (was_blocked_) return;
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
  pthread_sigmask(SIG_UNBLOCK, &pipe_set, nullptr);
}

// ------------------------------------------------------------------------------ a program

SandboxProcess::~SandboxProcess() { finish(); }

void SandboxProcess::close_stdin() {
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}
void SandboxProcess::close_stdout() {
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}
void SandboxProcess::close_stderr() {
  if (err_fd_ >= 0) close(err_fd_);
  err_fd_ = -1;
}
void SandboxProcess::close_fds() {
  close_stdin();
  close_stdout();
  close_stderr();
}

void SandboxProcess::kill() {
  if (killed_ || reaped_ || pid_ <= 0) return;
  // Sandboxed: bwrap's death kills the namespace's init (--die-with-parent), and with it every
  // process of the pid namespace. Unsandboxed: the program leads a process group of its own.
  if (direct_) ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  killed_ = true;
}

bool SandboxProcess::reap(bool block) {
  if (reaped_ || pid_ <= 0) return true;
  if (direct_) {
    // Unsandboxed, children the program left in its group go with it: signalled while the
    // exited leader still holds its pid (a zombie), so the group id cannot have been reused.
    siginfo_t info{};
    int r;
    while ((r = waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG))) < 0 &&
           errno == EINTR) {
    }
    if (r < 0 || info.si_pid != pid_) return false;
    ::kill(-pid_, SIGKILL);
  }
  int status = 0;
  pid_t w;
  while ((w = waitpid(pid_, &status, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {
  }
  if (w != pid_) return false;
  reaped_ = true;
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) signal_ = WTERMSIG(status);
  return true;
}

CgroupLeaf::Outcome SandboxProcess::finish() {
  if (finished_) return outcome_;
  finished_ = true;
  close_fds();
  if (!reaped_) {
    kill();
    reap(true);
  }
  if (leaf_) outcome_ = leaf_->finish();
  leaf_.reset();
  if (has_slot_) sandbox_->release(slot_);
  has_slot_ = false;
  return outcome_;
}

// Long because it is one start from slot to exec: the leaf, the memfds, the argv and the pipes
// are built before fork so that the child, between fork and exec, only makes
// async-signal-safe calls on them.
std::unique_ptr<SandboxProcess> Sandbox::start(const SandboxCommand& command, const SandboxLimits& limits,
                                               std::string* error) const {
  std::unique_ptr<SandboxProcess> proc(new SandboxProcess());
  proc->sandbox_ = this;
  proc->slot_ = acquire();
  proc->has_slot_ = true;
  proc->direct_ = !sandboxed();
  const unsigned slot = proc->slot_;
  auto fail = [&](std::string why) -> std::unique_ptr<SandboxProcess> {
    *error = std::move(why);
    return nullptr;  // proc's destructor ends the leaf and frees the slot
  };

  // Program files travel as memfds copied into the sandbox (--ro-bind-data): no host file is
  // shared with it. In the child they become fds 3, 4, ...
  std::vector<int> memfds;
  struct CloseAll {
    std::vector<int>* fds;
    ~CloseAll() {
      for (int fd : *fds) close(fd);
    }
  } close_memfds{&memfds};
  // The program's cgroup leaf, entered by the child before it execs bwrap, so that bwrap and
  // every process of the program are in it. With a cgroup detected, no leaf means no program.
  if (sandboxed() && cgroup_.kind != CgroupSupport::Kind::kNone) {
    std::string why;
    proc->leaf_ = CgroupLeaf::create(cgroup_, slot, limits.program_memory_bytes(), limits.max_processes, &why);
    if (!proc->leaf_) return fail("cgroup leaf (" + std::string(cgroup_kind_name(cgroup_.kind)) + "): " + why);
  }
  const std::vector<int> no_fds;
  const std::vector<int>& leaf_fds = proc->leaf_ ? proc->leaf_->procs_fds() : no_fds;

  if (sandboxed())
    for (const SandboxFile& f : command.files) {
      const int fd = make_memfd(f.content);
      if (fd < 0) return fail(std::string("memfd_create failed: ") + std::strerror(errno));
      memfds.push_back(fd);
    }

  std::vector<std::string> args;
  if (sandboxed()) {
    args = {bwrap_, "--unshare-all", "--die-with-parent"};
    // A one-shot program is the namespace's pid 1; a long-lived one gets bwrap's reaper as pid 1,
    // so that the orphans of the processes it starts do not pile up as zombies.
    if (!command.reaper) args.push_back("--as-pid-1");
    const std::vector<std::string> mounts = {"--new-session",
                                             "--clearenv",
                                             "--setenv", "PATH", "/usr/bin:/bin",
                                             "--setenv", "HOME", "/tmp",
                                             "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
                                             "--ro-bind", "/usr", "/usr",
                                             "--symlink", "usr/lib", "/lib",
                                             "--symlink", "usr/lib64", "/lib64",
                                             "--symlink", "usr/bin", "/bin",
                                             "--proc", "/proc",
                                             "--dev", "/dev",
                                             "--size", std::to_string(limits.shm_bytes),
                                             "--tmpfs", "/dev/shm",
                                             "--size", std::to_string(limits.tmp_bytes),
                                             "--tmpfs", "/tmp",
                                             "--dir", "/code"};
    args.insert(args.end(), mounts.begin(), mounts.end());
    for (const auto& [name, value] : command.env)
      for (const std::string& a : {std::string("--setenv"), name, value}) args.push_back(a);
    for (const std::string& path : command.read_only_paths) {
      if (path == "/usr" || path.rfind("/usr/", 0) == 0) continue;
      for (const std::string& a : {std::string("--ro-bind"), path, path}) args.push_back(a);
    }
    for (std::size_t i = 0; i < command.files.size(); ++i) {
      args.push_back("--ro-bind-data");
      args.push_back(std::to_string(3 + i));
      args.push_back(command.files[i].path);
    }
    // Last, once everything is mounted: the root and /dev (tmpfs of half the host's RAM) become
    // read-only; /tmp and /dev/shm, mounts of their own, stay the only writable places.
    for (const char* a : {"--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"}) args.push_back(a);
  }
  args.push_back(python_);
  if (command.isolated) args.push_back("-I");
  args.push_back("-B");
  for (const auto& a : command.python_args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Unsandboxed, the program inherits this process's environment with the command's on top.
  std::vector<std::string> env_strings;
  if (!sandboxed()) {
    for (char** e = environ; e && *e; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (const auto& kv : command.env) overridden = overridden || kv.first == name;
      if (!overridden) env_strings.push_back(entry);
    }
    for (const auto& [name, value] : command.env) env_strings.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exe = sandboxed() ? bwrap_ : python_;

  const bool root = geteuid() == 0 && sandboxed() && uid_base_ != 0;
  // As root, RLIMIT_NPROC is not enforced (the kernel exempts uid 0): every program gets an
  // unprivileged uid of its own, drawn at random from [uid_base, uid_base + kUidCount) and
  // distinct from the uids of this process's other running slots. RLIMIT_NPROC counts the
  // processes of that host uid, so a fork bomb exhausts only its own budget; the random draw
  // keeps two verifier instances (or two processes, e.g. ctest -j) from sharing a budget.
  // Otherwise the limit counts every task (thread) of the user: its current count + max_processes.
  const uid_t sandbox_uid = root ? pick_uid(slot) : getuid();
  const std::uint64_t nproc = root ? limits.max_processes : tasks_of(getuid()) + limits.max_processes;

  // status_pipe: the child reports a failure before exec (a ChildFailure); exec closes it.
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, status_pipe[2] = {-1, -1};
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], status_pipe[0],
                   status_pipe[1]})
      if (fd >= 0) close(fd);
    return fail(std::string("pipe failed: ") + std::strerror(err));
  }
  sigset_t no_signals;  // the program starts with no blocked signal, whatever this thread blocks
  sigemptyset(&no_signals);
  std::vector<int> staged(memfds.size());  // the child's scratch: no allocation after fork
  const bool sandboxed_run = sandboxed();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], status_pipe[0],
                   status_pipe[1]})
      close(fd);
    return fail(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    if (!enter_cgroup_leaf(leaf_fds.data(), leaf_fds.size())) report_and_exit(status_pipe[1], 'c');
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);  // SigpipeGuard's block is the host's, not the program's
    setsid();
    // Unsandboxed, the program dies with the thread that started it (bwrap does the same for
    // a sandboxed one: --die-with-parent).
    if (!sandboxed_run) prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    // memfds to 3, 4, ...: each fd still needed is first copied above all of them (F_DUPFD
    // never replaces an open fd), then into place, so no dup2 overwrites a source. The status
    // pipe's end stays open (close-on-exec) to report a failure up to exec.
    int top = 3 + static_cast<int>(memfds.size());
    for (int fd : memfds) top = std::max(top, fd + 1);
    top = std::max(top, status_pipe[1] + 1);
    for (std::size_t i = 0; i < memfds.size(); ++i) staged[i] = fcntl(memfds[i], F_DUPFD_CLOEXEC, top);
    const int status_fd = fcntl(status_pipe[1], F_DUPFD_CLOEXEC, top);
    for (std::size_t i = 0; i < memfds.size(); ++i) dup2(staged[i], 3 + static_cast<int>(i));
    syscall(SYS_close_range, 3u + memfds.size(), static_cast<unsigned>(status_fd) - 1u, 0);
    syscall(SYS_close_range, static_cast<unsigned>(status_fd) + 1u, ~0u, 0);
    if (sandboxed_run) {
      if (limits.cpu_seconds > 0) set_limit(RLIMIT_CPU, limits.cpu_seconds);
      set_limit(RLIMIT_AS, limits.memory_bytes);
      set_limit(RLIMIT_FSIZE, limits.file_bytes);
      set_limit(RLIMIT_CORE, 0);
      set_limit(RLIMIT_NPROC, nproc);
    }
    if (root) {
      if (setgroups(0, nullptr) != 0 || setgid(sandbox_uid) != 0 || setuid(sandbox_uid) != 0)
        report_and_exit(status_fd, 'u');
    }
    execve(exe.c_str(), argv.data(), envp.data());
    report_and_exit(status_fd, 'x');
  }
  close(status_pipe[1]);
  ChildFailure failure{};
  ssize_t got_failure;
  while ((got_failure = read(status_pipe[0], &failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  close(status_pipe[0]);
  if (got_failure == static_cast<ssize_t>(sizeof failure)) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    waitpid(pid, nullptr, 0);
    const std::string err = std::strerror(failure.err);
    if (failure.step == 'c') return fail("could not enter the cgroup leaf: " + err);
    if (failure.step == 'u') return fail("could not switch to the sandbox uid " + std::to_string(sandbox_uid) + ": " + err);
    return fail("could not run " + exe + ": " + err);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  proc->pid_ = pid;
  proc->in_fd_ = in_pipe[1];
  proc->out_fd_ = out_pipe[0];
  proc->err_fd_ = err_pipe[0];
  return proc;
}

// One program from start to reaping: feeds stdin, collects the output under the wall-clock
// limit and the output cap, kills and reaps.
RunResult Sandbox::run(const std::vector<std::string>& python_args, const std::vector<SandboxFile>& files,
                       const std::string& stdin_data, const SandboxLimits& limits) const {
  SandboxCommand command;
  command.python_args = python_args;
  command.files = files;
  return run(command, stdin_data, limits);
}

RunResult Sandbox::run(const SandboxCommand& command, const std::string& stdin_data, const SandboxLimits& limits) const {
  RunResult result;
  const SigpipeGuard no_sigpipe;  // a program may exit before it read its stdin
  std::unique_ptr<SandboxProcess> proc = start(command, limits, &result.error);
  if (!proc) return result;
  const auto t0 = std::chrono::steady_clock::now();  // after the wait for a slot
  result.started = true;
  fcntl(proc->stdin_fd(), F_SETFL, O_NONBLOCK);

  std::size_t written = 0;
  if (stdin_data.empty()) proc->close_stdin();
  char buf[65536];
  while (proc->stdout_fd() >= 0 || proc->stderr_fd() >= 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= limits.wall_seconds) {
      result.timed_out = true;
      proc->kill();
      break;
    }
    pollfd fds[3];
    int n = 0;
    int idx_in = -1, idx_out = -1, idx_err = -1;
    if (proc->stdin_fd() >= 0) fds[idx_in = n++] = {proc->stdin_fd(), POLLOUT, 0};
    if (proc->stdout_fd() >= 0) fds[idx_out = n++] = {proc->stdout_fd(), POLLIN, 0};
    if (proc->stderr_fd() >= 0) fds[idx_err = n++] = {proc->stderr_fd(), POLLIN, 0};
    const int wait_ms = static_cast<int>((limits.wall_seconds - elapsed) * 1000.0) + 1;
    const int r = poll(fds, static_cast<nfds_t>(n), std::min(wait_ms, 100));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = write(proc->stdin_fd(), stdin_data.data() + written, stdin_data.size() - written);
      if (w > 0) written += static_cast<std::size_t>(w);
      if (w < 0 && errno != EAGAIN) written = stdin_data.size();
      if (written >= stdin_data.size()) proc->close_stdin();
    }
    for (int stream = 0; stream < 2; ++stream) {
      const int idx = stream == 0 ? idx_out : idx_err;
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int fd = stream == 0 ? proc->stdout_fd() : proc->stderr_fd();
      const ssize_t got = read(fd, buf, sizeof buf);
      if (got <= 0) {
        if (stream == 0) proc->close_stdout();
        else proc->close_stderr();
        continue;
      }
      (stream == 0 ? result.out : result.err).append(buf, static_cast<std::size_t>(got));
      if (result.out.size() + result.err.size() > limits.output_bytes) {
        result.output_limit = true;
        const std::size_t keep = limits.output_bytes / 2;
        if (result.out.size() > keep) result.out.resize(keep);
        if (result.err.size() > keep) result.err.resize(keep);
        proc->kill();
      }
    }
    if (result.output_limit) break;
  }
  proc->close_stdin();
  proc->close_stdout();
  proc->close_stderr();
  // The output pipes closed: the program is done or detached them. Give it the rest of the
  // wall-clock budget to exit, then kill.
  for (;;) {
    if (proc->reap(false)) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= limits.wall_seconds && !proc->killed()) {
      result.timed_out = true;
      proc->kill();
    }
    if (proc->killed()) {
      proc->reap(true);
      break;
    }
    usleep(1000);
  }
  const CgroupLeaf::Outcome outcome = proc->finish();
  result.memory_limit = outcome.oom_killed;
  result.memory_peak_bytes = outcome.peak_bytes;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.exit_code = proc->exit_code();
  result.signal = proc->signal();
  return result;
}

std::string Sandbox::SelfTest::message() const {
  if (option != "bwrap") return why;
  return "the code sandbox does not work on this machine: " + why +
         " (it needs bubblewrap and unprivileged user namespaces; docs/sandbox.md)";
}

Sandbox::SelfTest Sandbox::self_test() const {
  if (sandboxed() && access(bwrap_.c_str(), X_OK) != 0)
    return {"bwrap", "bubblewrap not found at " + bwrap_ + " (Debian: apt-get install bubblewrap)"};
  if (access(python_.c_str(), X_OK) != 0) return {"python", "no executable Python interpreter at " + python_};
  SandboxLimits limits;
  limits.wall_seconds = 20.0;
  const RunResult r = run({"/code/t.py"}, {{"/code/t.py", "print(6 * 7)\n"}}, "", limits);
  if (!r.started) return {"bwrap", r.error};
  if (r.exit_code == 0 && r.out == "42\n") return {};
  std::string why = "a test program did not run in the sandbox (exit " + std::to_string(r.exit_code) + ")";
  if (!r.err.empty()) why += ": " + r.err.substr(0, 400);
  // bwrap's own failures (no user namespaces) are the sandbox's; anything else, the
  // interpreter's: bwrap could not exec it (a path the sandbox does not show), or it ran and
  // failed (not a Python 3).
  const bool bwrap_failed = r.err.rfind("bwrap: ", 0) == 0 && r.err.rfind("bwrap: execvp", 0) != 0;
  return {bwrap_failed ? "bwrap" : "python", why};
}

}  // namespace grpo_sandbox
