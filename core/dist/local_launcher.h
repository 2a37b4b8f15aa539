// The engine of `grpo-run --nproc N`: runs N ranks of the same program on this machine, torchrun-style, and
// supervises them until they all finish. Each rank finds its place through the torchrun variables, which
// discover_world() (world.h) reads.
#pragma once

#include <string>
#include <vector>

namespace grpo::core::dist {

struct LocalLaunchOptions {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;   // 0: pick a free port
  double grace_s = 60.0;  // after the first rank fails, how long the others get to notice and exit on their own
};

// Spawns nproc children running `argv` (argv[0] is the executable path, not searched in PATH) with the
// environment of this process plus RANK, LOCAL_RANK (= rank), WORLD_SIZE, LOCAL_WORLD_SIZE (= nproc),
// MASTER_ADDR, MASTER_PORT and GRPO_LOCAL_LAUNCH=1, and waits for all of them.
//
// Returns 0 when all exit 0; otherwise the exit status of the FIRST rank that failed (a rank killed by a
// signal counts as 128 + signal). When a rank fails, the others get grace_s seconds to exit by themselves,
// then SIGTERM, then SIGKILL 10 s later. SIGINT/SIGTERM received by this process while waiting are forwarded
// to every live child (the handlers are installed only for the duration of the call, then the previous ones
// are restored; do not call this from two threads at once). Logs to stderr, one line each prefixed
// "grpo-run: ", which rank failed with which status and which ranks had to be terminated.
//
// The ranks never outlive the launcher: each gets SIGKILL when the thread that started it ends (Linux's
// PR_SET_PDEATHSIG, set between fork and exec), so a launcher killed by SIGKILL takes its ranks with it.
// Call this from a thread that lives until it returns (grpo-run: the main thread).
//
// Throws std::runtime_error (naming what failed) for bad options (nproc < 1, empty argv, port out of range,
// negative grace) or when a rank cannot be started (fork fails, or the program cannot be executed); ranks
// already started are then killed and reaped before the throw.
int launch_local_ranks(const std::vector<std::string>& argv, const LocalLaunchOptions& options);

// A TCP port on `addr` that was free a moment ago (bind to port 0, read it, close). Another process may take
// it before the ranks bind it; the rendezvous then fails loudly rather than silently. Throws
// std::runtime_error when `addr` cannot be resolved or bound.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace grpo::core::dist
