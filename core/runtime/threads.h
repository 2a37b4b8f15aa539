// How many intra-op threads LibTorch computes with. LibTorch's OpenMP default on these
// machines is 1 thread whatever the core count, so every program chooses on purpose:
//   - OMP_NUM_THREADS, when set, wins (the user's or the launcher's choice; torchrun sets 1);
//   - otherwise the cores this process may run on (its CPU affinity), divided among the
//     data-parallel ranks of the host;
//   - a training run with rollout.async_steps > 0 has two busy threads, the trainer and the
//     rollout worker: each gets its share (async_thread_split), so they do not oversubscribe
//     the cores (OpenMP threads spin while they wait, and two full-width pools fight).
// The count is per calling thread (OpenMP's nthreads ICV) and inherited by threads started
// afterwards. docs/precision.md#threads has the measured effect.
#pragma once

#include <string>
#include <utility>

namespace grpo::core {

// The cores this process may run on (sched_getaffinity; at least 1).
int available_cores();

// The intra-op thread count for one of `ranks_on_host` processes, and where it came from
// ("OMP_NUM_THREADS=4" or "2 cores / 1 rank").
struct ThreadChoice {
  int threads = 1;
  std::string reason;
};
ThreadChoice choose_compute_threads(int ranks_on_host = 1);

// Applies choose_compute_threads to the calling thread and logs it under `who`; returns it.
int configure_compute_threads(const std::string& who, int ranks_on_host = 1);

// (trainer, rollout) threads out of `total` when both run at once: the trainer gets the
// larger half (its backward is the longer computation), each at least 1.
std::pair<int, int> async_thread_split(int total);

}  // namespace grpo::core
