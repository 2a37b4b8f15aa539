// Runs Python in a bubblewrap sandbox (docs/sandbox.md has the threat model): new user, pid,
// network, ipc, uts and mount namespaces; a read-only /usr and nothing else of the host (no
// /home, /root, /etc, project, /tmp) but the read-only paths a command names; a read-only root
// and /dev; two private size-limited tmpfs (/tmp and /dev/shm) as the only writable places;
// rlimits on CPU time, address space, file size and process count; where the host offers it,
// a cgroup leaf per program bounding the memory (tmpfs included) and processes of the whole
// program (cgroup.h); a fresh unprivileged uid per program when the host runs as root; the
// whole pid namespace killed when the program ends.
//
// Two uses: run() starts a one-shot program and collects its output under a wall-clock limit
// and an output cap (code_exec); start() hands back a running program with its pipes for a
// caller that talks to it (python_reward's persistent workers, the python tool's
// interpreters), which reads them through LineReader, under bounds. A Sandbox built without a
// bwrap path starts the interpreter directly (python_reward's `sandbox: false`), in a process
// group of its own that kill() takes down whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "plugins/shared/sandbox/cgroup.h"
#include "plugins/shared/sandbox/line_reader.h"

namespace grpo_sandbox {

struct SandboxLimits {
  double wall_seconds = 5.0;              // run(): killed after this long
  std::uint64_t cpu_seconds = 5;          // RLIMIT_CPU; 0 = none (a persistent worker)
  std::uint64_t memory_bytes = 1ull << 30;  // RLIMIT_AS; with a cgroup, + tmp + shm for the program
  std::uint64_t max_processes = 32;       // RLIMIT_NPROC (per sandbox uid); the cgroup's pids.max
  std::uint64_t output_bytes = 1u << 20;  // run(): stdout + stderr kept; more kills the program
  std::uint64_t file_bytes = 16u << 20;   // RLIMIT_FSIZE
  std::uint64_t tmp_bytes = 64u << 20;    // size of the writable tmpfs (/tmp, the cwd)
  std::uint64_t shm_bytes = 64u << 20;    // size of the /dev/shm tmpfs

  // The cgroup's memory limit of one program: its memory and what its tmpfs can hold.
  std::uint64_t program_memory_bytes() const { return memory_bytes + tmp_bytes + shm_bytes; }
};

struct SandboxFile {
  std::string path;     // inside the sandbox, under /code ("/code/solution.py")
  std::string content;
};

// What to start: the interpreter with these arguments, and what it sees.
struct SandboxCommand {
  std::vector<std::string> python_args;  // after `python -B` (and `-I` when isolated)
  std::vector<SandboxFile> files;        // copied in read-only, under /code (sandboxed only)
  // Host paths bound read-only at the same path (sandboxed only): an interpreter outside
  // /usr, a reward module's folder. Paths under /usr are already there and are skipped.
  std::vector<std::string> read_only_paths;
  // Set in the program's environment: on top of PATH, HOME=/tmp and PYTHONDONTWRITEBYTECODE
  // when sandboxed (the host's environment is not passed in), on top of the host's otherwise.
  std::vector<std::pair<std::string, std::string>> env;
  bool isolated = true;  // python -I: ignore PYTHON* variables and the user site
  // Sandboxed: bwrap's reaper is the namespace's pid 1 (a long-lived program: the orphans of
  // what it starts are reaped); otherwise the program itself is (--as-pid-1).
  bool reaper = false;
};

// A started program. Destroying it kills and reaps it (and ends its cgroup leaf and slot).
class SandboxProcess {
 public:
  ~SandboxProcess();
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;

  // The program's standard streams (this side of the pipes; -1 once closed).
  int stdin_fd() const { return in_fd_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdin();
  void close_stdout();
  void close_stderr();

  // Kills every process of the program: the pid namespace (sandboxed: bwrap's death takes it
  // down, --die-with-parent) or the process group (unsandboxed). Idempotent.
  void kill();
  bool killed() const { return killed_; }
  // Reaps the program, waiting when `block`; true once reaped.
  bool reap(bool block);
  // Exit status once reaped (-1 / 0 before).
  int exit_code() const { return exit_code_; }
  int signal() const { return signal_; }
  // Kills and reaps, ends the cgroup leaf: whether its memory limit killed a process, its peak.
  CgroupLeaf::Outcome finish();

 private:
  friend class Sandbox;
  SandboxProcess() = default;
  void close_fds();

  const class Sandbox* sandbox_ = nullptr;
  unsigned slot_ = 0;
  bool has_slot_ = false;
  bool direct_ = false;  // unsandboxed: kill the process group
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  bool killed_ = false, reaped_ = false, finished_ = false;
  int exit_code_ = -1, signal_ = 0;
  std::unique_ptr<CgroupLeaf> leaf_;
  CgroupLeaf::Outcome outcome_;
};

struct RunResult {
  bool started = false;       // the sandbox could be set up (bwrap ran)
  int exit_code = -1;         // the program's exit status (bwrap passes it through)
  int signal = 0;             // the signal that ended bwrap, if any
  bool timed_out = false;     // wall-clock limit
  bool output_limit = false;  // output cap
  bool memory_limit = false;  // the cgroup's memory limit killed a process of the program (OOM)
  std::uint64_t memory_peak_bytes = 0;  // the cgroup leaf's peak charge (0 without a cgroup)
  double seconds = 0.0;
  std::string out, err;       // captured (capped)
  std::string error;          // why it could not run (fork/pipe/cgroup/uid failures)

  // Ran, exited 0, and no limit stopped it: only then does its output count.
  bool exited_cleanly() const { return started && exit_code == 0 && !timed_out && !output_limit && !memory_limit; }
};

// Blocks SIGPIPE in the calling thread while it lives, so that writing to a program that
// exited fails with EPIPE instead of killing the host; a SIGPIPE raised meanwhile is
// discarded on destruction.
class SigpipeGuard {
 public:
  SigpipeGuard();
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  bool was_blocked_ = false;
};

class Sandbox {
 public:
  // Uids a root host runs programs as: [uid_base, uid_base + kUidCount).
  static constexpr unsigned kUidCount = 65536;

  // bwrap and python are absolute paths (bwrap "": no sandbox, python runs directly); uid_base
  // is the first uid used for sandboxed programs when this process is root (each program
  // draws a fresh uid from [uid_base, uid_base + kUidCount)); ignored otherwise. uid_base 0:
  // programs keep this process's uid, root included (bwrap leaves them no capability; the
  // read-only mounts and the namespaces hold, RLIMIT_NPROC does not bind uid 0, the cgroup's
  // pids.max does). Programs go
  // into cgroup leaves when `cgroup` offers them (cgroup_support()); a leaf that cannot be
  // made fails the start rather than running unbounded. `slots` bounds how many programs run
  // at once.
  Sandbox(std::string bwrap, std::string python, unsigned slots, unsigned uid_base,
          const CgroupSupport& cgroup);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs `python -I -B argv...` inside a fresh sandbox with `files` under /code (read-only) and
  // `stdin_data` as standard input. Blocks while all slots are busy. Thread-safe.
  RunResult run(const std::vector<std::string>& python_args, const std::vector<SandboxFile>& files,
                const std::string& stdin_data, const SandboxLimits& limits) const;
  // The same for any command (its environment, read-only paths, isolation).
  RunResult run(const SandboxCommand& command, const std::string& stdin_data, const SandboxLimits& limits) const;

  // Starts `command` and returns it running (it holds a slot until destroyed; blocks while
  // all are busy), or nullptr with `error` saying why it could not start. Thread-safe.
  std::unique_ptr<SandboxProcess> start(const SandboxCommand& command, const SandboxLimits& limits,
                                        std::string* error) const;

  bool sandboxed() const { return !bwrap_.empty(); }
  const std::string& python() const { return python_; }

  // Why programs cannot run here, and which option it is about: "python" (the interpreter is
  // missing, or is not one that runs in the sandbox) or "bwrap" (the sandbox itself).
  struct SelfTest {
    std::string option;
    std::string why;  // "" when the sandbox works
    // The configuration error to report under `option`.
    std::string message() const;
  };
  // Runs a trivial program and says what stopped it.
  SelfTest self_test() const;

  unsigned slots() const { return slots_; }
  const CgroupSupport& cgroup() const { return cgroup_; }

 private:
  friend class SandboxProcess;
  unsigned acquire() const;
  void release(unsigned slot) const;
  unsigned pick_uid(unsigned slot) const;

  std::string bwrap_, python_;
  unsigned slots_, uid_base_;
  const CgroupSupport& cgroup_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace grpo_sandbox
