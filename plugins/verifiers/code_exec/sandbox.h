// Runs one untrusted program in a bubblewrap sandbox (docs/sandbox.md has the threat model):
// new user, pid, network, ipc, uts and mount namespaces; a read-only /usr and nothing else of
// the host (no /home, /root, /etc, project, /tmp); a read-only root and /dev; two private
// size-limited tmpfs (/tmp and /dev/shm) as the only writable places; rlimits on CPU time,
// address space, file size and process count; where the host offers it, a cgroup leaf per run
// bounding the memory (tmpfs included) and processes of the whole program (cgroup.h); a fresh
// unprivileged uid per run when the host runs as root; a wall-clock limit and an output cap
// enforced from outside; the whole pid namespace killed when the run ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cgroup.h"

namespace grpo_code {

struct SandboxLimits {
  double wall_seconds = 5.0;              // killed after this long
  std::uint64_t cpu_seconds = 5;          // RLIMIT_CPU
  std::uint64_t memory_bytes = 1ull << 30;  // RLIMIT_AS; with a cgroup, + tmp + shm for the program
  std::uint64_t max_processes = 32;       // RLIMIT_NPROC (per sandbox uid); the cgroup's pids.max
  std::uint64_t output_bytes = 1u << 20;  // stdout + stderr kept; more kills the program
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

class Sandbox {
 public:
  // Uids a root host runs programs as: [uid_base, uid_base + kUidCount).
  static constexpr unsigned kUidCount = 65536;

  // bwrap and python are absolute paths; uid_base is the first uid used for sandboxed programs
  // when this process is root (each run draws a fresh uid from [uid_base, uid_base +
  // kUidCount)); ignored otherwise. Runs go into cgroup leaves when `cgroup` offers them
  // (cgroup_support()); a leaf that cannot be made fails the run rather than running unbounded.
  Sandbox(std::string bwrap, std::string python, unsigned slots, unsigned uid_base,
          const CgroupSupport& cgroup);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs `python -I -B argv...` inside a fresh sandbox with `files` under /code (read-only) and
  // `stdin_data` as standard input. Blocks while all slots are busy. Thread-safe.
  RunResult run(const std::vector<std::string>& python_args, const std::vector<SandboxFile>& files,
                const std::string& stdin_data, const SandboxLimits& limits) const;

  // Runs a trivial program; returns "" when the sandbox works here, else why not.
  std::string self_test() const;

  unsigned slots() const { return slots_; }
  const CgroupSupport& cgroup() const { return cgroup_; }

 private:
  unsigned acquire() const;
  void release(unsigned slot) const;
  unsigned pick_uid(unsigned slot) const;

  std::string bwrap_, python_;
  unsigned slots_, uid_base_;
  const CgroupSupport& cgroup_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace grpo_code
