// The python tool's stateful mode: one persistent, sandboxed interpreter (driver.py) per
// trajectory, so that the names one call defines are there in the trajectory's next call.
//
// Lifetime: a trajectory's interpreter starts at its first call and ends at end(), at a fault
// of its own (a time-out, a crash, output that is not the protocol: it is killed, and the
// trajectory's next call starts a fresh one and is told that the state was lost), or when it
// is evicted: at most `max_interpreters` live at once, and a start beyond that stops the least
// recently used idle one (a busy one is never evicted; the start waits for one to go idle, up
// to the call's time limit).
//
// Threads: run() and end() are thread-safe. Calls for different trajectories run
// concurrently; calls for one trajectory must not overlap (the Tool contract guarantees it).
// Interpreters are started from one thread the pool owns, because bwrap dies with the thread
// that started it (--die-with-parent): a host thread that ends must not take a trajectory's
// state with it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "plugins/shared/sandbox/sandbox.h"

namespace grpo_python_tool {

// What one run of code produced, the same for a one-shot program and a cell.
struct Outcome {
  std::string out;  // the first max_chars characters of stdout
  std::string err;  // the last max_chars characters of stderr (a cell's: with its traceback)
  std::size_t out_chars = 0, err_chars = 0;  // their full lengths, in characters
  int exit_code = 0;
  bool timed_out = false;
  // Why the program was stopped, besides a time-out. One-shot: "it ran out of memory
  // (memory_mb)"; stateful, a verb phrase of the interpreter: "exited with status 3".
  std::string killed;
  std::string error;     // it could not run at all (the sandbox could not start it)
  // Stateful only.
  bool fresh = false;    // this call started the trajectory's interpreter
  std::string lost;      // what happened to the previous interpreter ("timed out after 5 s"), or ""
  bool state_lost_now = false;  // this call's fault killed the interpreter
  double seconds = 0.0;
};

struct InterpreterSettings {
  std::string driver_source;  // driver.py
  std::string driver_config;  // its argv[1] (JSON: {"max_chars": N})
  // The longest line taken from the driver (its answer to a cell); a longer one is cut while
  // it is read and the interpreter is killed: a cell wrote into the protocol channel.
  std::size_t max_answer_bytes = std::size_t{1} << 20;
  std::size_t max_interpreters = 64;
  double start_timeout_s = 30.0;  // start-up to the driver's "ready", on top of the call's limit
  grpo_sandbox::SandboxLimits limits;
};

class InterpreterPool {
 public:
  // `sandbox` must outlive the pool and have at least max_interpreters slots.
  InterpreterPool(const grpo_sandbox::Sandbox& sandbox, InterpreterSettings settings);
  // Kills every interpreter.
  ~InterpreterPool();
  InterpreterPool(const InterpreterPool&) = delete;
  InterpreterPool& operator=(const InterpreterPool&) = delete;

  // Runs `code` in the trajectory's interpreter (started first when it has none) and waits up
  // to timeout_s for the cell to finish.
  Outcome run(std::string_view trajectory_id, const std::string& code, double timeout_s);
  // Kills the trajectory's interpreter and forgets the trajectory.
  void end(std::string_view trajectory_id);

 private:
  struct Session;
  using Proc = std::unique_ptr<grpo_sandbox::SandboxProcess>;

  Proc start_on_spawner(std::string* error);
  void spawner_main();
  bool await_ready(Session& s, double timeout_s, std::string* error);
  void run_cell(Session& s, const std::string& code, double timeout_s, Outcome* outcome);
  // Kills the session's interpreter after a fault of its own; `why` goes to the next call.
  void lose(Session& s, const std::string& why);

  const grpo_sandbox::Sandbox& sandbox_;
  InterpreterSettings settings_;

  std::mutex mutex_;
  std::condition_variable idle_;  // a session went idle or an interpreter ended
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_;
  std::size_t live_ = 0;          // sessions holding (or about to start) an interpreter
  std::uint64_t clock_ = 0;       // use order, for least-recently-used eviction

  std::mutex spawn_mutex_;
  std::condition_variable spawn_cv_;
  std::deque<std::function<void()>> spawn_jobs_;
  bool spawn_stop_ = false;
  std::thread spawner_;
};

}  // namespace grpo_python_tool
