#include "sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

namespace grpo_code {

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

// Processes of `uid` now (the non-root RLIMIT_NPROC counts them all).
std::uint64_t processes_of(uid_t uid) {
  std::uint64_t n = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("Uid:", 0) == 0) {
        if (std::strtoul(line.c_str() + 4, nullptr, 10) == uid) ++n;
        break;
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

// Long because it is one run from slot to reaping: the leaf, the memfds, the argv and the
// pipes are built before fork so that the child, between fork and exec, only makes
// async-signal-safe calls on them; then the parent's I/O loop, the kill and the leaf's end.
RunResult Sandbox::run(const std::vector<std::string>& python_args, const std::vector<SandboxFile>& files,
                       const std::string& stdin_data, const SandboxLimits& limits) const {
  RunResult result;
  const unsigned slot = acquire();
  struct Release {
    const Sandbox* s;
    unsigned slot;
    ~Release() { s->release(slot); }
  } release_guard{this, slot};

  // Program files travel as memfds copied into the sandbox (--ro-bind-data): no host file is
  // shared with it. In the child they become fds 3, 4, ...
  std::vector<int> memfds;
  auto close_all = [&] {
    for (int fd : memfds) close(fd);
  };
  // The program's cgroup leaf, entered by the child before it execs bwrap, so that bwrap and
  // every process of the program are in it. With a cgroup detected, no leaf means no run.
  std::unique_ptr<CgroupLeaf> leaf;
  if (cgroup_.kind != CgroupSupport::Kind::kNone) {
    std::string why;
    leaf = CgroupLeaf::create(cgroup_, slot, limits.program_memory_bytes(), limits.max_processes, &why);
    if (!leaf) {
      result.error = "cgroup leaf (" + std::string(cgroup_kind_name(cgroup_.kind)) + "): " + why;
      return result;
    }
  }
  const std::vector<int> no_fds;
  const std::vector<int>& leaf_fds = leaf ? leaf->procs_fds() : no_fds;

  for (const SandboxFile& f : files) {
    const int fd = make_memfd(f.content);
    if (fd < 0) {
      close_all();
      result.error = std::string("memfd_create failed: ") + std::strerror(errno);
      return result;
    }
    memfds.push_back(fd);
  }

  std::vector<std::string> args = {bwrap_,
                                   "--unshare-all",
                                   "--die-with-parent",
                                   "--as-pid-1",
                                   "--new-session",
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
  for (std::size_t i = 0; i < files.size(); ++i) {
    args.push_back("--ro-bind-data");
    args.push_back(std::to_string(3 + i));
    args.push_back(files[i].path);
  }
  // Last, once everything is mounted: the root and /dev (tmpfs of half the host's RAM) become
  // read-only; /tmp and /dev/shm, mounts of their own, stay the only writable places.
  for (const char* a : {"--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"}) args.push_back(a);
  args.push_back(python_);
  args.push_back("-I");
  args.push_back("-B");
  for (const auto& a : python_args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};

  const bool root = geteuid() == 0;
  // As root, RLIMIT_NPROC is not enforced (the kernel exempts uid 0): every run gets an
  // unprivileged uid of its own, drawn at random from [uid_base, uid_base + kUidCount) and
  // distinct from the uids of this process's other running slots. RLIMIT_NPROC counts the
  // processes of that host uid, so a fork bomb exhausts only its own budget; the random draw
  // keeps two verifier instances (or two processes, e.g. ctest -j) from sharing a budget.
  // Otherwise the limit counts every process of the user.
  const uid_t sandbox_uid = root ? pick_uid(slot) : getuid();
  const std::uint64_t nproc = root ? limits.max_processes : processes_of(getuid()) + limits.max_processes;

  // status_pipe: the child reports a failure before exec (a ChildFailure); exec closes it.
  int in_pipe[2], out_pipe[2], err_pipe[2], status_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    close_all();
    result.error = std::string("pipe failed: ") + std::strerror(errno);
    return result;
  }
  std::vector<int> staged(memfds.size());  // the child's scratch: no allocation after fork
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close_all();
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], status_pipe[0],
                   status_pipe[1]})
      close(fd);
    result.error = std::string("fork failed: ") + std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    if (!enter_cgroup_leaf(leaf_fds.data(), leaf_fds.size())) report_and_exit(status_pipe[1], 'c');
    setsid();
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
    set_limit(RLIMIT_CPU, limits.cpu_seconds);
    set_limit(RLIMIT_AS, limits.memory_bytes);
    set_limit(RLIMIT_FSIZE, limits.file_bytes);
    set_limit(RLIMIT_CORE, 0);
    set_limit(RLIMIT_NPROC, nproc);
    if (root) {
      if (setgroups(0, nullptr) != 0 || setgid(sandbox_uid) != 0 || setuid(sandbox_uid) != 0)
        report_and_exit(status_fd, 'u');
    }
    execve(bwrap_.c_str(), argv.data(), envp);
    report_and_exit(status_fd, 'x');
  }
  close_all();
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
    if (failure.step == 'c') result.error = "could not enter the cgroup leaf: " + err;
    else if (failure.step == 'u')
      result.error = "could not switch to the sandbox uid " + std::to_string(sandbox_uid) + ": " + err;
    else result.error = "could not run " + bwrap_ + ": " + err;
    return result;
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  result.started = true;

  std::size_t written = 0;
  int in_fd = in_pipe[1];
  if (stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  int out_fd = out_pipe[0], err_fd = err_pipe[0];
  bool killed = false;
  auto kill_all = [&] {
    if (!killed) {
      // bwrap's death kills the namespace's init (--die-with-parent), and with it every
      // process of the pid namespace.
      kill(pid, SIGKILL);
      killed = true;
    }
  };
  char buf[65536];
  while (out_fd >= 0 || err_fd >= 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= limits.wall_seconds) {
      result.timed_out = true;
      kill_all();
      break;
    }
    pollfd fds[3];
    int n = 0;
    int idx_in = -1, idx_out = -1, idx_err = -1;
    if (in_fd >= 0) fds[idx_in = n++] = {in_fd, POLLOUT, 0};
    if (out_fd >= 0) fds[idx_out = n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[idx_err = n++] = {err_fd, POLLIN, 0};
    const int wait_ms = static_cast<int>((limits.wall_seconds - elapsed) * 1000.0) + 1;
    const int r = poll(fds, static_cast<nfds_t>(n), std::min(wait_ms, 100));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = write(in_fd, stdin_data.data() + written, stdin_data.size() - written);
      if (w > 0) written += static_cast<std::size_t>(w);
      if (w < 0 && errno != EAGAIN) written = stdin_data.size();
      if (written >= stdin_data.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
    for (auto [idx, fd, sink] : {std::tuple<int, int*, std::string*>{idx_out, &out_fd, &result.out},
                                 std::tuple<int, int*, std::string*>{idx_err, &err_fd, &result.err}}) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = read(*fd, buf, sizeof buf);
      if (got <= 0) {
        close(*fd);
        *fd = -1;
        continue;
      }
      sink->append(buf, static_cast<std::size_t>(got));
      if (result.out.size() + result.err.size() > limits.output_bytes) {
        result.output_limit = true;
        const std::size_t keep = limits.output_bytes / 2;
        if (result.out.size() > keep) result.out.resize(keep);
        if (result.err.size() > keep) result.err.resize(keep);
        kill_all();
      }
    }
    if (result.output_limit) break;
  }
  for (int fd : {in_fd, out_fd, err_fd})
    if (fd >= 0) close(fd);
  int status = 0;
  // The output pipes closed: the program is done or detached them. Give it the rest of the
  // wall-clock budget to exit, then kill.
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= limits.wall_seconds && !killed) {
      result.timed_out = true;
      kill_all();
    }
    if (killed) {
      waitpid(pid, &status, 0);
      break;
    }
    usleep(1000);
  }
  if (leaf) {
    const CgroupLeaf::Outcome outcome = leaf->finish();
    result.memory_limit = outcome.oom_killed;
    result.memory_peak_bytes = outcome.peak_bytes;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string Sandbox::self_test() const {
  if (access(bwrap_.c_str(), X_OK) != 0) return "bubblewrap not found at " + bwrap_ + " (Debian: apt-get install bubblewrap)";
  if (access(python_.c_str(), X_OK) != 0) return "python not found at " + python_;
  SandboxLimits limits;
  limits.wall_seconds = 20.0;
  const RunResult r = run({"/code/t.py"}, {{"/code/t.py", "print(6 * 7)\n"}}, "", limits);
  if (!r.started) return r.error;
  if (r.exit_code == 0 && r.out == "42\n") return "";
  std::string why = "a test program did not run in the sandbox (exit " + std::to_string(r.exit_code) + ")";
  if (!r.err.empty()) why += ": " + r.err.substr(0, 400);
  return why;
}

}  // namespace grpo_code
