// The tool thread pool: runs tool calls concurrently (across the samples of a rollout) with a
// per-call time limit enforced by the host, the way the verifier pool does it: a call still
// running at its deadline is reported as timed out at once, its worker is abandoned (detached:
// it exits by itself if the call ever returns, and its late result is dropped) and replaced,
// so a hanging tool costs one thread, never the run. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpo/sdk/tool.h"

namespace grpo::core {

struct ToolJob {
  std::size_t tag = 0;  // the caller's: comes back in the outcome
  std::shared_ptr<const sdk::Tool> tool;
  std::string tool_name;  // for messages
  std::string arguments;  // JSON object text
  std::string trajectory_id;
  std::uint32_t call_index = 0;
  std::string metadata = "{}";
  double timeout_s = 10.0;
};

struct ToolOutcome {
  std::size_t tag = 0;
  sdk::ToolObservation observation;  // a thrown exception or a time-out becomes an error observation
  bool timed_out = false;
  bool threw = false;
  double seconds = 0.0;  // from the call's start to its end (or to the deadline)
};

class ToolRunner {
 public:
  // `threads` workers (0: 4 x the hardware threads, at least 4: tools mostly wait on processes).
  explicit ToolRunner(std::size_t threads);
  // Stops the workers without waiting: they are detached threads that hold only the shared
  // state and their job (the tool through its shared_ptr), and exit when their call returns.
  ~ToolRunner();
  ToolRunner(const ToolRunner&) = delete;
  ToolRunner& operator=(const ToolRunner&) = delete;

  // Queues a call; returns at once. Its outcome comes out of take().
  void submit(ToolJob job);
  // Queues tool->end_trajectory(id) (no outcome; bounded by `timeout_s` like a call).
  void end_trajectory(std::shared_ptr<const sdk::Tool> tool, std::string trajectory_id, double timeout_s);
  // The outcomes that arrived since the last take(), time-outs included. `wait`: blocks until
  // there is at least one (returns empty at once when no call is queued or running).
  std::vector<ToolOutcome> take(bool wait);

  std::size_t threads() const { return threads_; }
  // Workers given up on so far (each was stuck in a call past its deadline).
  std::size_t abandoned_workers() const;

  struct State;  // shared with the (possibly detached) workers

 private:
  std::size_t threads_;
  std::shared_ptr<State> state_;
};

}  // namespace grpo::core
