// Two data-parallel ranks as two threads of this process on a real Gloo process group (rank 0
// hosts the TCPStore): for tests of the communicator, the gradient reducer and sharding.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"

namespace grpo::testing {

// Runs body(rank, distributed) on two ranks, one thread each; rethrows a rank's failure.
inline void run_two_ranks(const std::function<void(int, core::dist::Distributed&)>& body, double heartbeat_s = 0.2,
                          double timeout_s = 30) {
  const int port = core::dist::pick_free_port();
  core::dist::DistOptions options;
  options.timeout_s = timeout_s;
  options.heartbeat_s = heartbeat_s;
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      try {
        core::dist::WorldInfo w;
        w.rank = w.local_rank = rank;
        w.world_size = w.local_world_size = 2;
        w.master_port = port;
        w.launcher = "test";
        core::dist::Distributed d(w, options, false);
        body(rank, d);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace grpo::testing
