#include "core/runtime/threads.h"

#include <ATen/Parallel.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace grpo::core {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadChoice choose_compute_threads(int ranks_on_host) {
  ThreadChoice c;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1) {
      c.threads = static_cast<int>(n);
      c.reason = std::string("OMP_NUM_THREADS=") + env;
      return c;
    }
    spdlog::warn("OMP_NUM_THREADS='{}' is not a positive integer; ignored", env);
  }
  const int cores = available_cores();
  const int ranks = std::max(1, ranks_on_host);
  c.threads = std::max(1, cores / ranks);
  c.reason = std::to_string(cores) + (cores == 1 ? " core / " : " cores / ") + std::to_string(ranks) +
             (ranks == 1 ? " rank" : " ranks on this host");
  return c;
}

int configure_compute_threads(const std::string& who, int ranks_on_host) {
  const ThreadChoice c = choose_compute_threads(ranks_on_host);
  at::set_num_threads(c.threads);
  spdlog::info("{}: {} intra-op thread{} ({})", who, c.threads, c.threads == 1 ? "" : "s", c.reason);
  return c.threads;
}

std::pair<int, int> async_thread_split(int total) {
  if (total <= 1) return {1, 1};
  const int trainer = (total + 1) / 2;
  return {trainer, std::max(1, total - trainer)};
}

}  // namespace grpo::core
