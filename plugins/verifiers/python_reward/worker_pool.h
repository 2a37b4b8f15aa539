// A pool of persistent Python interpreters running one reward function (driver.py), fed
// batches of rows by the concurrent verify() calls of the host's verifier pool.
//
// Each worker is a thread that owns one interpreter: it takes up to batch_size queued rows,
// sends them as one JSON line, and reads one answer line per row. Faults are the worker's,
// not the run's: an interpreter that exits, hangs past timeout_s (per row; per call for TRL)
// or writes what is not the protocol (or a protocol line over kMaxAnswerBytes) is killed and
// started again on the next batch. The row it was on scores 0 with the reason (a time-out as
// a time-out: RowOutcome::Kind::kTimeout); the rows of the batch it had not reached go back
// to the front of the queue. Its pipes are read through the sandbox's LineReader, so what it
// writes is bounded while it is read. A TRL call covers the whole batch, so a failed TRL batch is run again
// row by row to find the rows at fault. A Python exception fails its row only, and its
// traceback is logged once per distinct error (type and place), not once per row.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plugins/shared/sandbox/sandbox.h"

namespace grpo_python_reward {

// The longest protocol line taken from a worker (one row's answer). The driver cuts what it
// sends to fit (details, error text, traceback); a longer line is a function writing into the
// protocol channel: it is cut while it is read, and the worker is killed and restarted.
constexpr std::size_t kMaxAnswerBytes = std::size_t{1} << 20;

struct PoolSettings {
  std::string name;            // for logs: "python_reward (rewards.py:compute_score)"
  std::string driver_source;   // driver.py
  std::string driver_config;   // its argv[1] (JSON)
  bool trl = false;            // one call per batch: split failed batches
  unsigned workers = 1;
  unsigned batch_size = 32;
  double timeout_s = 10.0;     // per row (per call for TRL)
  double start_timeout_s = 120.0;  // importing the module
  grpo_sandbox::SandboxCommand command;  // read-only paths and environment; the pool adds the driver
  grpo_sandbox::SandboxLimits limits;
};

struct RowOutcome {
  enum class Kind { kScore, kNotApplicable, kNonFinite, kError, kTimeout };
  Kind kind = Kind::kError;
  double score = 0.0;
  std::string details;  // JSON object text (verl dict keys besides "score"), or ""
  std::string error;    // kError, kTimeout: why; kNonFinite: the value ("nan", "inf", "-inf")
};

class WorkerPool {
 public:
  // Starts every worker and waits until each has imported the function. Throws
  // std::runtime_error with the reason (the Python traceback for an import error or a missing
  // function) when one cannot start; no process is left running then.
  WorkerPool(const grpo_sandbox::Sandbox& sandbox, PoolSettings settings);
  // Fails the rows still queued, stops the workers and kills their interpreters.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Scores one row (a JSON object text: {"c", "g", "l", "p", "m"}, see driver.py). Blocks
  // until a worker answered it. Thread-safe.
  RowOutcome score(std::string row_json);

  // Interpreter (re)starts so far, the first ones included.
  std::size_t starts() const;

 private:
  struct Request;
  struct Worker;
  using Proc = std::unique_ptr<grpo_sandbox::SandboxProcess>;

  Proc start_process(std::string* error);
  bool await_ready(Worker& w, double timeout_s, std::string* error);
  void worker_main(Worker& w);
  void run_batch(Worker& w, std::vector<std::shared_ptr<Request>>& batch);
  // One row's answer ({"i", ...} with "s", "none", "nonfinite" or "error") as its outcome (an
  // error's traceback logged once); false when it is none of them.
  bool row_outcome(const nlohmann::json& msg, RowOutcome* out);
  void settle(const std::shared_ptr<Request>& r, RowOutcome outcome);
  void requeue_front(std::vector<std::shared_ptr<Request>> requests, bool alone, const std::string& why);
  void restart(Worker& w, const std::string& why);
  void drain_stderr(Worker& w);
  void log_stderr_line(const Worker& w, const std::string& line);
  void log_once(const std::string& key, const std::string& message);

  const grpo_sandbox::Sandbox& sandbox_;
  PoolSettings settings_;

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable started_;  // a worker's first start is done
  std::deque<std::shared_ptr<Request>> queue_;
  bool stopping_ = false;
  std::atomic<bool> shutting_down_{false};  // stopping_, read without the lock by busy workers
  std::size_t starts_ = 0;
  std::size_t next_batch_id_ = 0;

  std::mutex log_mutex_;
  std::set<std::string> logged_;
  std::size_t stderr_lines_ = 0;

  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace grpo_python_reward
