// The whole-program bound of a sandboxed run: one cgroup leaf per run holding bwrap and every
// process of the program, with a memory limit (memory + its tmpfs sizes, swap included) and a
// pids limit. rlimits bound each process alone; only a cgroup bounds their sum.
//
// What the host offers is detected once per process (cgroup_support()), in this order:
//   cgroup v2  the unified hierarchy offers memory and pids in this process's own cgroup and
//              they can be enabled for children of it (see cgroup.cpp on the no-internal-
//              processes rule);
//   cgroup v1  separate memory and pids hierarchies in which this process may create groups
//              under its own cgroups (hybrid hosts, older distributions);
//   none       neither: only the per-process rlimits and the tmpfs sizes bound a program.
// Leaves live in a parent group "grpo-code" under this process's own cgroup(s), named
// "<pid>-<tag>.<slot>-<counter>" (tag: random per copy of this library) so that concurrent runs, verifier instances and processes never
// collide; leaves of processes that no longer exist are removed at detection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace grpo_sandbox {

// This process's cgroup directories, from /proc/self/mountinfo and /proc/self/cgroup ("" where
// a hierarchy is not mounted or this process's cgroup is outside the mounted part of it).
struct CgroupDirs {
  std::string v2;         // the unified hierarchy
  std::string v1_memory;  // v1 hierarchy holding the memory controller
  std::string v1_pids;    // v1 hierarchy holding the pids controller
};
CgroupDirs locate_cgroup_dirs(const std::string& mountinfo, const std::string& proc_self_cgroup);

struct CgroupSupport {
  enum class Kind { kNone, kV2, kV1 };
  Kind kind = Kind::kNone;
  std::string reason;  // which hierarchy is used, or why none can be
  // Parent groups of the leaves (directories; v2 uses one for both controllers) and their
  // paths within the hierarchy, as /proc/PID/cgroup shows them.
  std::string memory_parent, pids_parent;
  std::string memory_parent_path, pids_parent_path;
};

// Detected on first call (thread-safe), then the same answer for the life of the process.
const CgroupSupport& cgroup_support();

const char* cgroup_kind_name(CgroupSupport::Kind kind);

// One run's leaf. Created before fork; the child enters it with enter_cgroup_leaf(procs_fds())
// before exec'ing bwrap; the parent calls finish() after reaping bwrap.
class CgroupLeaf {
 public:
  struct Outcome {
    bool oom_killed = false;       // the memory limit killed a process of the run
    std::uint64_t peak_bytes = 0;  // the leaf's peak memory charge (0 where the kernel does not say)
  };

  // Creates the leaf `<pid>-<tag>.<slot>-<counter>` with the two limits; nullptr and `error` on failure.
  static std::unique_ptr<CgroupLeaf> create(const CgroupSupport& support, unsigned slot, std::uint64_t memory_bytes,
                                            std::uint64_t max_processes, std::string* error);
  ~CgroupLeaf();  // finish() if it was not called
  CgroupLeaf(const CgroupLeaf&) = delete;
  CgroupLeaf& operator=(const CgroupLeaf&) = delete;

  // cgroup.procs files of the leaf, open for writing (O_CLOEXEC).
  const std::vector<int>& procs_fds() const { return procs_fds_; }

  // Kills every process left in the leaf, reads the OOM count and the peak, removes the leaf.
  Outcome finish();

 private:
  CgroupLeaf() = default;
  void close_fds();

  CgroupSupport::Kind kind_ = CgroupSupport::Kind::kNone;
  std::vector<std::string> dirs_;   // the leaf in each hierarchy (v2: one; v1: memory, pids)
  std::vector<std::string> paths_;  // the same within each hierarchy ("/.../grpo-code/<name>")
  std::vector<int> procs_fds_;
  bool finished_ = false;
  Outcome outcome_;
};

// In a forked child, before exec: moves the calling process into the leaf (writes "0" to each
// cgroup.procs fd). Async-signal-safe. False when a write failed (errno says why).
bool enter_cgroup_leaf(const int* fds, std::size_t count);

}  // namespace grpo_sandbox
