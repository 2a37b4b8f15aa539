// Data-parallel communication on LibTorch's own c10d process groups (no home-made transport):
// a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT, Gloo on CPU, NCCL where LibTorch has CUDA.
//
// Failure handling. Every rank runs a heartbeat thread that writes, through its own store
// connection, a counter and the collective its training thread is in or last completed (with
// its sequence number), every dist.heartbeat_s and within ~20 ms of each change, so that a
// killed rank is named with the collective it was actually in. When a collective fails
// (a peer's connection reset, or no answer within dist.timeout_s) the communicator finds out
// WHICH rank is lost before it throws PeerLostError: a rank that announced its own error
// (announce_failure), a rank whose heartbeat stopped (died or frozen), a rank that is alive but
// has not reached the collective (hung), or rank 0 when the store it hosts does not answer.
//
// Thread safety: a Communicator is used by one thread at a time (collectives on one process
// group must be issued in the same order on every rank); the trainer's thread uses train(),
// the rollout thread rollout(). Distributed itself is thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dist/world.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core::dist {

// The dist.* configuration keys.
struct DistOptions {
  std::string launcher = "auto";  // auto | torchrun | slurm | mpi | none (see world.h)
  std::string backend = "auto";   // auto | gloo | nccl
  double timeout_s = 1800.0;     // a collective that waits longer fails (a hung peer)
  double heartbeat_s = 1.0;      // heartbeat period (the lost-rank diagnosis waits ~3 of them)
  double bucket_mb = 25.0;       // gradient all-reduce bucket size
  std::string sharding = "none";  // none | optimizer | gradients | full (core/dist/sharding.h)
};

// dist.launcher, backend, timeout_s, heartbeat_s, bucket_mb, sharding, validated (sdk::ConfigError naming the key).
DistOptions dist_options(const sdk::ConfigValue& root);

// A peer rank died, hung or failed; what() names it and what it was doing.
class PeerLostError : public std::runtime_error {
 public:
  PeerLostError(const std::string& message, int lost_rank) : std::runtime_error(message), lost_rank_(lost_rank) {}
  int lost_rank() const { return lost_rank_; }  // -1 when it could not be told

 private:
  int lost_rank_;
};

// A collective the backend refused when it was issued (a dtype or a device it does not take,
// say): this rank's own error, so the peers are not diagnosed.
class CollectiveRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Distributed;

// A handle on one process group; see the thread-safety note above.
class Communicator {
 public:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  ~Communicator();

  int rank() const;
  int world_size() const;

  // In-place sum over ranks. `what` names the collective in errors ("gradients").
  void all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what);
  // The same, started now; wait() blocks until done (errors as above).
  class Pending {
   public:
    Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    ~Pending();
    void wait();
    bool valid() const { return impl_ != nullptr; }

   private:
    friend class Communicator;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  Pending all_reduce_sum_async(at::Tensor& tensor, const std::string& what);
  // Sums `tensor` over ranks into rank `root`'s copy (the others' are left unspecified), started now.
  Pending reduce_sum_async(at::Tensor& tensor, int root, const std::string& what);
  // outputs[r] = rank r's `input` (every rank's input of one shape; outputs may be views).
  void all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input, const std::string& what);

  double all_reduce_max(double value, const std::string& what);
  double all_reduce_sum(double value, const std::string& what);
  // Every rank's bytes, in rank order.
  std::vector<std::string> all_gather_bytes(const std::string& mine, const std::string& what);
  // Overwrites `tensors` with rank `root`'s.
  void broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what);
  void barrier(const std::string& what);

  // Seconds this communicator spent blocked in collectives since the last call (then reset).
  double take_blocked_seconds();

 private:
  template <class Launch>
  Pending start(at::Tensor& tensor, const std::string& what, Launch&& launch);
  std::unique_ptr<Impl> impl_;
};

class Distributed {
 public:
  // Rendezvous: rank 0 hosts the TCPStore at master_addr:master_port, every rank connects (and
  // waits up to timeout_s for the others), then the process groups are created. Throws
  // std::runtime_error naming the address, the backend and the world on failure.
  Distributed(const WorldInfo& world, const DistOptions& options, bool tensors_on_cuda);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  const WorldInfo& world() const { return world_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.world_size; }
  bool is_main() const { return world_.rank == 0; }
  const std::string& backend() const { return backend_; }
  const DistOptions& options() const { return options_; }

  Communicator& train() { return *train_; }
  Communicator& rollout() { return *rollout_; }

  // Tells the other ranks why this one is about to stop (they name it in their errors).
  // Best effort: never throws.
  void announce_failure(const std::string& message) noexcept;

  struct State;  // shared with the communicators and the heartbeat thread

 private:
  WorldInfo world_;
  DistOptions options_;
  std::string backend_;
  std::shared_ptr<State> state_;
  std::unique_ptr<Communicator> train_, rollout_;
};

}  // namespace grpo::core::dist
