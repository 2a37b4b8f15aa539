#include "core/dist/process_group.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef GRPO_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(GRPO_HAVE_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/config/config_access.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core::dist {

namespace {

#ifndef GRPO_HAVE_NCCL
// dist_options reports it before anything loads; choose_backend guards options built by hand.
constexpr const char* kNcclUnavailable =
    "nccl needs a build against a LibTorch with CUDA and NCCL, and this one has neither (Debian's libtorch-dev "
    "is CPU-only): use gloo or auto, or rebuild with -DGRPO_WITH_CUDA=AUTO and a CUDA LibTorch (docs/precision.md)";
#endif
#ifndef GRPO_HAVE_GLOO
// PyTorch's pip wheels ship c10d's Gloo process group but not gloo's own headers, which
// ProcessGroupGloo.hpp includes: such a build has NCCL only (GRPO_HAVE_GLOO, GrpoBuildHelpers.cmake).
constexpr const char* kGlooUnavailable =
    "gloo is not in this build: it was configured against a LibTorch without gloo's headers (PyTorch's pip "
    "wheels ship none): use nccl or auto on GPUs, or rebuild with gloo's headers (-DGRPO_GLOO_INCLUDE_DIR, matching "
    "the gloo this LibTorch was built with)";
#endif

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

Ms to_ms(double seconds) { return Ms(static_cast<std::int64_t>(seconds * 1000.0)); }
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string heartbeat_key(int rank) { return "grpo/heartbeat/" + std::to_string(rank); }
std::string failed_key(int rank) { return "grpo/failed/" + std::to_string(rank); }

std::string to_string(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

c10::intrusive_ptr<c10d::TCPStore> connect_store(const WorldInfo& w, bool server, double timeout_s, bool wait_workers) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(w.master_port);
  o.isServer = server;
  o.numWorkers = static_cast<std::size_t>(w.world_size);
  o.waitWorkers = wait_workers;
  o.timeout = to_ms(timeout_s);
  return c10::make_intrusive<c10d::TCPStore>(w.master_addr, o);
}

// Between two position writes of the heartbeat thread: a rank's position reaches the store
// within this of a change (a killed rank is named with the collective it was in), and a rank
// running many short collectives writes at most 1 / kPositionWriteInterval times a second.
constexpr auto kPositionWriteInterval = Ms(20);

// One heartbeat as stored: "<counter> <collective seq> <0: in progress | 1: completed> <label>".
struct Heartbeat {
  bool present = false;
  std::int64_t counter = -1, seq = -1;
  bool completed = false;
  std::string label;
};

Heartbeat parse_heartbeat(const std::string& value) {
  Heartbeat h;
  std::istringstream in(value);
  int completed = 0;
  if (in >> h.counter >> h.seq >> completed) {
    h.present = true;
    h.completed = completed != 0;
    std::getline(in >> std::ws, h.label);
  }
  return h;
}

// Where a heartbeat had its rank: "in collective #12 'loss denominators'", "just past collective
// #12 'loss denominators' (completed)", or "at start-up (before its first collective)".
std::string position_text(std::int64_t seq, bool completed, const std::string& label) {
  if (seq <= 0) return "at start-up (before its first collective)";
  const std::string collective = "collective #" + std::to_string(seq) + " '" + label + "'";
  return completed ? "just past " + collective + " (completed)" : "in " + collective;
}

}  // namespace

DistOptions dist_options(const sdk::ConfigValue& root) {
  const sdk::ConfigView view(find_config_node(root, {"dist"}), "dist");
  DistOptions o;
  o.launcher = view.get_choice("launcher", "auto", {"auto", "torchrun", "slurm", "mpi", "none"});
  o.backend = view.get_choice("backend", "auto", {"auto", "gloo", "nccl"});
#ifndef GRPO_HAVE_NCCL
  // Before any model is loaded, and before a launch: this build cannot create the group.
  if (o.backend == "nccl") fail_at_config_key(root, {"dist", "backend"}, kNcclUnavailable);
#endif
#ifndef GRPO_HAVE_GLOO
  if (o.backend == "gloo") fail_at_config_key(root, {"dist", "backend"}, kGlooUnavailable);
#endif
  auto positive = [&](const char* key, double fallback) {
    const double v = view.get_double(key, fallback);
    if (!std::isfinite(v) || v <= 0) fail_at_config_key(root, {"dist", key}, "expected a number > 0, got " + std::to_string(v));
    return v;
  };
  o.timeout_s = positive("timeout_s", o.timeout_s);
  o.heartbeat_s = positive("heartbeat_s", o.heartbeat_s);
  o.bucket_mb = positive("bucket_mb", o.bucket_mb);
  o.sharding = view.get_choice("sharding", o.sharding, {"none", "optimizer", "gradients", "full"});
  if (o.heartbeat_s * 3 >= o.timeout_s)
    fail_at_config_key(root, {"dist", "heartbeat_s"}, "must be well below dist.timeout_s / 3 = " + std::to_string(o.timeout_s / 3));
  return o;
}

// ---------------------------------------------------------------------------------------------
struct Distributed::State {
  WorldInfo world;
  DistOptions options;
  c10::intrusive_ptr<c10d::Store> store;  // the set-up connection: rendezvous, announce_failure
  std::mutex store_mutex;

  // The training thread's position: the collective it is in, or the last it completed.
  struct Position {
    std::int64_t seq = 0;  // 0: none yet
    bool completed = true;
    std::string label = "start-up";
  };
  std::mutex position_mutex;
  Position at;

  std::thread heartbeat;
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  bool position_changed = false;  // under stop_mutex: the heartbeat thread writes it soon

  // Returns the collective's sequence number.
  std::int64_t enter(const std::string& what) {
    std::int64_t seq;
    {
      std::lock_guard<std::mutex> lock(position_mutex);
      seq = ++at.seq;
      at.completed = false;
      at.label = what;
    }
    changed();
    return seq;
  }
  // Collective `seq` completed; a later one entered meanwhile (an async all-reduce) stays current.
  void leave(std::int64_t seq) {
    {
      std::lock_guard<std::mutex> lock(position_mutex);
      if (at.seq != seq) return;
      at.completed = true;
    }
    changed();
  }
  void changed() {
    {
      std::lock_guard<std::mutex> lock(stop_mutex);
      position_changed = true;
    }
    stop_cv.notify_all();
  }
  Position position() {
    std::lock_guard<std::mutex> lock(position_mutex);
    return at;
  }

  // A heartbeat every heartbeat_s, and one soon after every change of position (at most one per
  // kPositionWriteInterval): written only once a period, the position of a rank that ran
  // through many short collectives before it was killed was that of the period's start.
  void heartbeat_loop() {
    c10::intrusive_ptr<c10d::TCPStore> hb;
    std::int64_t counter = 0;
    bool warned = false;
    for (;;) {
      const auto written_at = Clock::now();
      try {
        if (!hb) hb = connect_store(world, false, std::max(5.0, 3 * options.heartbeat_s), false);
        const Position p = position();
        hb->set(heartbeat_key(world.rank), to_bytes(std::to_string(++counter) + " " + std::to_string(p.seq) + " " +
                                                    (p.completed ? "1 " : "0 ") + p.label));
        spdlog::trace("heartbeat {} {}", counter, position_text(p.seq, p.completed, p.label));
      } catch (const std::exception& e) {
        // The store's host (rank 0) is gone or finished: the collectives report it.
        if (!warned) spdlog::debug("heartbeat: {}", e.what());
        warned = true;
        hb.reset();
      }
      std::unique_lock<std::mutex> lock(stop_mutex);
      if (stop_cv.wait_until(lock, written_at + kPositionWriteInterval, [&] { return stop; })) return;
      stop_cv.wait_until(lock, written_at + to_ms(options.heartbeat_s), [&] { return stop || position_changed; });
      if (stop) return;
      position_changed = false;
    }
  }

  // Which rank is lost, and why. `my_seq`: the failing collective's sequence number when it is
  // the training thread's (comparable across ranks), else 0.
  PeerLostError diagnose(const std::string& what, const std::string& error, std::int64_t my_seq) {
    const bool compare_position = my_seq > 0;
    const std::string context = "collective " + (compare_position ? "#" + std::to_string(my_seq) + " " : std::string()) + "'" +
                                what + "' failed on rank " + std::to_string(world.rank) + ": ";
    const std::string store_addr = world.master_addr + ":" + std::to_string(world.master_port);
    c10::intrusive_ptr<c10d::TCPStore> probe;
    auto read = [&](int r, const std::string& key) -> std::string {
      return probe->check({key}) ? to_string(probe->get(key)) : std::string();
    };
    try {
      probe = connect_store(world, false, std::max(5.0, 3 * options.heartbeat_s), false);
      // 1. A rank that said why it stopped.
      for (int r = 0; r < world.world_size; ++r) {
        if (r == world.rank) continue;
        const std::string msg = read(r, failed_key(r));
        if (!msg.empty()) return PeerLostError(context + "rank " + std::to_string(r) + " failed: " + msg, r);
      }
      // 2. Heartbeats that stopped: read twice, ~3 periods apart.
      std::vector<Heartbeat> before(world.world_size), after(world.world_size);
      for (int r = 0; r < world.world_size; ++r) before[r] = parse_heartbeat(read(r, heartbeat_key(r)));
      const double wait_s = 3 * options.heartbeat_s;
      std::this_thread::sleep_for(to_ms(wait_s));
      std::vector<int> stale;
      for (int r = 0; r < world.world_size; ++r) {
        if (r == world.rank) continue;
        after[r] = parse_heartbeat(read(r, heartbeat_key(r)));
        if (!after[r].present || after[r].counter == before[r].counter) stale.push_back(r);
      }
      // A rank may have announced its failure meanwhile.
      for (int r = 0; r < world.world_size; ++r) {
        if (r == world.rank) continue;
        const std::string msg = read(r, failed_key(r));
        if (!msg.empty()) return PeerLostError(context + "rank " + std::to_string(r) + " failed: " + msg, r);
      }
      if (!stale.empty()) {
        const int r = stale.front();
        std::string m = context + "lost rank " + std::to_string(r) + ": no heartbeat for " + fmt::format("{:.1f}", wait_s) +
                        " s (the process died or is frozen)";
        if (after[r].present) m += "; its last heartbeat had it " + position_text(after[r].seq, after[r].completed, after[r].label);
        if (stale.size() > 1) {
          m += "; also silent:";
          for (std::size_t i = 1; i < stale.size(); ++i) m += " rank " + std::to_string(stale[i]);
        }
        return PeerLostError(m + " (" + error + ")", r);
      }
      // 3. Alive but not where this rank is: hung in its own work.
      if (compare_position)
        for (int r = 0; r < world.world_size; ++r) {
          if (r == world.rank || after[r].seq >= my_seq) continue;
          return PeerLostError(context + "rank " + std::to_string(r) + " is alive but did not reach collective #" +
                                   std::to_string(my_seq) + " '" + what + "' within dist.timeout_s = " +
                                   std::to_string(int(options.timeout_s)) + " s; it is still " +
                                   position_text(after[r].seq, after[r].completed, after[r].label) + " (" + error + ")",
                               r);
        }
    } catch (const std::exception& e) {
      if (world.rank != 0)
        return PeerLostError(context + "lost rank 0: the rendezvous store it hosts at " + store_addr +
                                 " does not answer (" + e.what() + "); collective error: " + error,
                             0);
      return PeerLostError(context + error + " (the store could not be read to tell which rank: " + e.what() + ")", -1);
    }
    return PeerLostError(context + error + " (every rank still has a heartbeat; no rank announced a failure)", -1);
  }
};

// ---------------------------------------------------------------------------------------------
struct Communicator::Impl {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::shared_ptr<Distributed::State> state;
  bool tracks_position = false;  // the training thread's communicator
  double blocked_s = 0.0;
  // Where the communicator's own small tensors (scalars, byte payloads) live: NCCL only takes
  // CUDA tensors (this rank's GPU, cuda:LOCAL_RANK as the policy's), Gloo host ones.
  at::Device device{at::kCPU};

  // The collective's sequence number on the training thread's communicator, else 0.
  std::int64_t enter(const std::string& what) { return tracks_position ? state->enter(what) : 0; }
  [[noreturn]] void fail(const std::string& what, std::int64_t seq, const std::exception& e) {
    throw state->diagnose(what, e.what(), seq);
  }
  // An exception from issuing a collective (not from waiting for it): the backend's own checks.
  [[noreturn]] void refused(const std::string& what, std::int64_t seq, const std::exception& e) {
    if (seq > 0) state->leave(seq);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw CollectiveRefused("c10d refused the collective '" + what + "' when it was issued: " +
                            (c10_error ? c10_error->what_without_backtrace() : std::string(e.what())));
  }
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what, std::int64_t seq) {
    const auto t0 = Clock::now();
    try {
      work->wait();
    } catch (const std::exception& e) {
      fail(what, seq, e);
    }
    blocked_s += seconds_since(t0);
    if (seq > 0) state->leave(seq);
  }
  // Starts the collective `launch` returns (a c10d::Work) and waits for it.
  template <class Launch>
  void run(const std::string& what, Launch&& launch) {
    const std::int64_t seq = enter(what);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = launch();
    } catch (const std::exception& e) {
      refused(what, seq, e);
    }
    wait(work, what, seq);
  }
  double reduce_scalar(double value, c10d::ReduceOp op, const std::string& what) {
    std::vector<at::Tensor> t{torch::full({1}, value, torch::TensorOptions().dtype(torch::kFloat64).device(device))};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    run(what, [&] { return group->allreduce(t, o); });
    return t[0].to(at::kCPU).item<double>();
  }
};

struct Communicator::Pending::Impl {
  Communicator::Impl* owner = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors;  // kept alive until done
  std::string what;
  std::int64_t seq = 0;
};

Communicator::Pending::Pending() = default;
Communicator::Pending::Pending(Pending&&) noexcept = default;
Communicator::Pending& Communicator::Pending::operator=(Pending&&) noexcept = default;
Communicator::Pending::~Pending() {
  // An abandoned operation is still waited for: its buffers must outlive it.
  if (impl_) try {
      impl_->work->wait();
    } catch (...) {
    }
}

void Communicator::Pending::wait() {
  if (!impl_) return;
  auto impl = std::move(impl_);
  impl->owner->wait(impl->work, impl->what, impl->seq);
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->group->getRank(); }
int Communicator::world_size() const { return impl_->group->getSize(); }

void Communicator::all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) {
  // One tensor per collective: c10d's NCCL backend refuses several tensors in one call (its
  // deprecated one-thread multi-device mode; seen on LibTorch 2.11), Gloo takes either.
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    impl_->run(what, [&] { return impl_->group->allreduce(one, c10d::AllreduceOptions{}); });
  }
}

// Starts the collective `launch` makes of the kept tensors; its Pending waits for it.
template <class Launch>
Communicator::Pending Communicator::start(at::Tensor& tensor, const std::string& what, Launch&& launch) {
  const std::int64_t seq = impl_->enter(what);
  Pending p;
  p.impl_ = std::make_unique<Pending::Impl>();
  p.impl_->owner = impl_.get();
  p.impl_->tensors = {tensor};
  p.impl_->what = what;
  p.impl_->seq = seq;
  try {
    p.impl_->work = launch(p.impl_->tensors);
  } catch (const std::exception& e) {
    p.impl_.reset();
    impl_->refused(what, seq, e);
  }
  return p;
}

Communicator::Pending Communicator::all_reduce_sum_async(at::Tensor& tensor, const std::string& what) {
  return start(tensor, what, [&](std::vector<at::Tensor>& t) { return impl_->group->allreduce(t, c10d::AllreduceOptions{}); });
}

Communicator::Pending Communicator::reduce_sum_async(at::Tensor& tensor, int root, const std::string& what) {
  c10d::ReduceOptions o;
  o.rootRank = root;
  return start(tensor, what, [&](std::vector<at::Tensor>& t) { return impl_->group->reduce(t, o); });
}

void Communicator::all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input, const std::string& what) {
  std::vector<std::vector<at::Tensor>> out{outputs};
  std::vector<at::Tensor> in{input};
  impl_->run(what, [&] { return impl_->group->allgather(out, in); });
}

double Communicator::all_reduce_sum(double value, const std::string& what) {
  return impl_->reduce_scalar(value, c10d::ReduceOp::SUM, what);
}

double Communicator::all_reduce_max(double value, const std::string& what) {
  return impl_->reduce_scalar(value, c10d::ReduceOp::MAX, what);
}

std::vector<std::string> Communicator::all_gather_bytes(const std::string& mine, const std::string& what) {
  const int world = world_size();
  // Sizes first: all-gather needs equal shapes, so the payloads are padded to the longest.
  const auto on_device = [&](torch::Dtype dtype) { return torch::TensorOptions().dtype(dtype).device(impl_->device); };
  std::vector<at::Tensor> size_in{torch::full({1}, static_cast<std::int64_t>(mine.size()), on_device(torch::kInt64))};
  std::vector<std::vector<at::Tensor>> size_out(1);
  for (int r = 0; r < world; ++r) size_out[0].push_back(torch::empty({1}, on_device(torch::kInt64)));
  impl_->run(what + " (sizes)", [&] { return impl_->group->allgather(size_out, size_in); });
  std::int64_t longest = 1;
  std::vector<std::int64_t> sizes;
  for (const auto& t : size_out[0]) {
    sizes.push_back(t.to(at::kCPU).item<std::int64_t>());
    longest = std::max(longest, sizes.back());
  }
  at::Tensor host_in = torch::zeros({longest}, torch::kUInt8);  // filled on the host, then moved
  std::copy(mine.begin(), mine.end(), host_in.data_ptr<std::uint8_t>());
  std::vector<at::Tensor> data_in{host_in.to(impl_->device)};
  std::vector<std::vector<at::Tensor>> data_out(1);
  for (int r = 0; r < world; ++r) data_out[0].push_back(torch::empty({longest}, on_device(torch::kUInt8)));
  impl_->run(what, [&] { return impl_->group->allgather(data_out, data_in); });
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    data_out[0][static_cast<std::size_t>(r)] = data_out[0][static_cast<std::size_t>(r)].to(at::kCPU);
    const auto* p = data_out[0][static_cast<std::size_t>(r)].data_ptr<std::uint8_t>();
    out.emplace_back(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
  }
  return out;
}

void Communicator::broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    impl_->run(what, [&] { return impl_->group->broadcast(one, o); });
  }
}

void Communicator::barrier(const std::string& what) {
  // An all-reduce rather than c10d's barrier: the same failure path (and Gloo's barrier
  // has no per-call timeout of its own).
  all_reduce_sum(0.0, what);
}

double Communicator::take_blocked_seconds() {
  const double s = impl_->blocked_s;
  impl_->blocked_s = 0.0;
  return s;
}

// ---------------------------------------------------------------------------------------------
namespace {

// LibTorch 2.x made Gloo and NCCL c10d `Backend`s that a ProcessGroup dispatches to by the
// tensors' device; in 1.x they were ProcessGroups themselves.
template <typename B>
c10::intrusive_ptr<c10d::ProcessGroup> as_group(c10::intrusive_ptr<B> backend, const c10::intrusive_ptr<c10d::Store>& store,
                                                const WorldInfo& w, const char* name,
                                                std::initializer_list<c10::DeviceType> devices) {
#if TORCH_VERSION_MAJOR >= 2
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, w.rank, w.world_size);
  const auto type = c10d::ProcessGroup::strToBackendType(name);
  group->setDefaultBackend(type);
  const c10::intrusive_ptr<c10d::Backend> as_backend = std::move(backend);
  for (const auto device : devices) group->setBackend(device, type, as_backend);
  return group;
#else
  (void)store;
  (void)w;
  (void)name;
  (void)devices;
  return backend;
#endif
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

c10::intrusive_ptr<c10d::ProcessGroup> make_group(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                                  const WorldInfo& w, const DistOptions& options) {
#if defined(GRPO_HAVE_NCCL)
  if (backend == "nccl") {
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = to_ms(options.timeout_s);
    return as_group(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, w.rank, w.world_size, o), store, w,
                    "nccl", {c10::DeviceType::CUDA});
  }
#endif
  if (backend != "gloo") throw std::runtime_error("dist.backend '" + backend + "' is not available in this build");
#ifndef GRPO_HAVE_GLOO
  (void)store;
  (void)w;
  (void)options;
  throw std::runtime_error(std::string("dist.backend: ") + kGlooUnavailable);
#else
  auto o = c10d::ProcessGroupGloo::Options::create(to_ms(options.timeout_s));
  // The network interface: GLOO_SOCKET_IFNAME (as PyTorch), loopback when every rank is on
  // this machine, else the address this host's name resolves to.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (is_loopback(w.master_addr))
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return as_group(c10::make_intrusive<c10d::ProcessGroupGloo>(store, w.rank, w.world_size, o), store, w,
                  "gloo", {c10::DeviceType::CPU, c10::DeviceType::CUDA});
#endif
}

std::string choose_backend(const std::string& requested, bool tensors_on_cuda) {
  if (requested == "gloo") return "gloo";
  if (requested == "nccl") {
#if defined(GRPO_HAVE_NCCL)
    return "nccl";
#else
    throw std::runtime_error(std::string("dist.backend: ") + kNcclUnavailable);
#endif
  }
  if (requested != "auto") throw std::runtime_error("dist.backend '" + requested + "': expected auto, gloo or nccl");
#if defined(GRPO_HAVE_NCCL)
  if (tensors_on_cuda) return "nccl";
#endif
  (void)tensors_on_cuda;
  return "gloo";
}

}  // namespace

Distributed::Distributed(const WorldInfo& world, const DistOptions& options, bool tensors_on_cuda)
    : world_(world), options_(options), backend_(choose_backend(options.backend, tensors_on_cuda)) {
  state_ = std::make_shared<State>();
  state_->world = world;
  state_->options = options;
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  const auto t0 = Clock::now();
  try {
    state_->store = connect_store(world, world.rank == 0, options.timeout_s, true);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous at " + where + " failed for rank " + std::to_string(world.rank) + " of " +
                             std::to_string(world.world_size) + " (waited up to dist.timeout_s = " +
                             std::to_string(int(options.timeout_s)) + " s for " +
                             (world.rank == 0 ? "the other ranks to connect" : "rank 0's store") + "): " + e.what());
  }
  auto make = [&](const char* prefix, bool tracks) {
    auto impl = std::make_unique<Communicator::Impl>();
    try {
      impl->group = make_group(backend_, c10::make_intrusive<c10d::PrefixStore>(prefix, state_->store), world, options);
    } catch (const std::exception& e) {
      throw std::runtime_error("creating the " + backend_ + " process group '" + prefix + "' (rank " +
                               std::to_string(world.rank) + " of " + std::to_string(world.world_size) + ", store " + where +
                               ") failed: " + e.what());
    }
    impl->state = state_;
    impl->tracks_position = tracks;
    if (backend_ == "nccl") impl->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
    return std::make_unique<Communicator>(std::move(impl));
  };
  train_ = make("train", true);
  rollout_ = make("rollout", false);
  state_->heartbeat = std::thread([s = state_] { s->heartbeat_loop(); });
  spdlog::info("distributed: {}; backend {}; connected in {:.2f} s", world.describe(), backend_, seconds_since(t0));
}

Distributed::~Distributed() {
  {
    std::lock_guard<std::mutex> lock(state_->stop_mutex);
    state_->stop = true;
  }
  state_->stop_cv.notify_all();
  if (state_->heartbeat.joinable()) state_->heartbeat.join();
  rollout_.reset();
  train_.reset();
}

void Distributed::announce_failure(const std::string& message) noexcept {
  try {
    std::lock_guard<std::mutex> lock(state_->store_mutex);
    state_->store->setTimeout(to_ms(5.0));
    state_->store->set(failed_key(world_.rank), to_bytes(message.empty() ? std::string("(no message)") : message));
  } catch (...) {
  }
}

}  // namespace grpo::core::dist
