#include "plugins/verifiers/python_reward/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "grpo/sdk/log.h"
#include "grpo/sdk/text.h"

namespace grpo_python_reward {

namespace sdk = ::grpo::sdk;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// What of a worker's stderr is kept for a fault report, and how much of it is logged.
constexpr std::size_t kStderrTail = 2048;
constexpr std::size_t kStderrLinesAtInfo = 200;
constexpr std::size_t kLineCap = 1000;

double seconds_until(Clock::time_point t) { return std::chrono::duration<double>(t - Clock::now()).count(); }

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string signal_name(int sig) {
  const char* text = strsignal(sig);
  return "signal " + std::to_string(sig) + (text ? " (" + std::string(text) + ")" : std::string());
}

std::string preview(const std::string& s, std::size_t n = 200) { return sdk::clip_utf8(s, n); }

using grpo_sandbox::LineReader;
using Lines = std::vector<LineReader::Line>;

}  // namespace

struct WorkerPool::Request {
  std::string row;
  bool alone = false;  // run in a batch of its own (its TRL batch failed)
  // Guarded by the pool's mutex.
  bool done = false;
  RowOutcome outcome;
  std::condition_variable cv;
};

struct WorkerPool::Worker {
  unsigned index = 0;
  Proc proc;
  bool start_reported = false;  // guarded by the pool's mutex: the first start is done
  std::string start_error;      // why it failed

  LineReader out{kMaxAnswerBytes};                      // the protocol
  LineReader err{kLineCap, /*carriage_returns=*/true};  // stderr: progress bars end lines with '\r'
  std::string err_tail;  // the last kStderrTail bytes of stderr, for fault reports
  std::thread thread;
};

// ------------------------------------------------------------------------------ start-up

WorkerPool::WorkerPool(const grpo_sandbox::Sandbox& sandbox, PoolSettings settings)
    : sandbox_(sandbox), settings_(std::move(settings)) {
  for (unsigned i = 0; i < settings_.workers; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->index = i;
  }
  // Each worker thread starts its own interpreter: a worker dies with the thread that started
  // it (PR_SET_PDEATHSIG, bwrap's --die-with-parent), and these threads live as long as the
  // pool, the constructing thread perhaps not. All import at once: start-up costs one import.
  std::string error;
  for (auto& w : workers_) {
    try {
      w->thread = std::thread([this, wp = w.get()] { worker_main(*wp); });
    } catch (const std::system_error& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      w->start_reported = true;
      w->start_error = settings_.name + ": could not start a worker thread: " + e.what();
    }
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    started_.wait(lock, [&] {
      std::size_t reported = 0;
      for (const auto& w : workers_) reported += w->start_reported ? 1 : 0;
      return reported == workers_.size();
    });
    for (const auto& w : workers_)
      if (error.empty() && !w->start_error.empty()) error = w->start_error;
  }
  if (!error.empty()) {
    shutting_down_.store(true);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    for (auto& w : workers_)
      if (w->thread.joinable()) w->thread.join();
    workers_.clear();  // kills and reaps every interpreter started
    throw std::runtime_error(error);
  }
}

WorkerPool::~WorkerPool() {
  shutting_down_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& r : queue_) {
      r->done = true;
      r->outcome.kind = RowOutcome::Kind::kError;
      r->outcome.error = "not scored: the python_reward verifier is shutting down";
      r->cv.notify_one();
    }
    queue_.clear();
  }
  work_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
  workers_.clear();
}

std::size_t WorkerPool::starts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return starts_;
}

WorkerPool::Proc WorkerPool::start_process(std::string* error) {
  grpo_sandbox::SandboxCommand command = settings_.command;
  command.python_args = {"-c", settings_.driver_source, settings_.driver_config};
  command.isolated = false;  // PYTHONPATH and the user site of the configured interpreter apply
  Proc proc = sandbox_.start(command, settings_.limits, error);
  if (!proc) {
    *error = settings_.name + ": could not start a Python worker: " + *error;
    return nullptr;
  }
  for (int fd : {proc->stdin_fd(), proc->stdout_fd(), proc->stderr_fd()}) fcntl(fd, F_SETFL, O_NONBLOCK);
  std::lock_guard<std::mutex> lock(mutex_);
  ++starts_;
  return proc;
}

void WorkerPool::drain_stderr(Worker& w) {
  if (!w.proc || w.proc->stderr_fd() < 0) return;
  // Bounded while read (LineReader): a line past kLineCap is cut and the rest of it dropped,
  // so a function that prints a gigabyte without a newline costs one log line.
  Lines lines;
  if (!w.err.read(w.proc->stderr_fd(), &lines)) {
    lines.emplace_back();
    if (!w.err.take_rest(&lines.back())) lines.pop_back();  // its last words without a newline
    w.proc->close_stderr();
  }
  for (const LineReader::Line& line : lines) {
    std::string text = line.text;
    if (line.cut) text += " ...[the line went on; dropped past " + std::to_string(kLineCap) + " bytes]";
    w.err_tail += text + "\n";
    log_stderr_line(w, text);
  }
  if (w.err_tail.size() > kStderrTail) w.err_tail.erase(0, w.err_tail.size() - kStderrTail);
}

void WorkerPool::log_stderr_line(const Worker& w, const std::string& line) {
  std::size_t n;
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    n = ++stderr_lines_;
  }
  const std::string text = settings_.name + " worker " + std::to_string(w.index) + ": " + line;
  if (n <= kStderrLinesAtInfo) sdk::log_info(text);
  else sdk::log_debug(text);
  if (n == kStderrLinesAtInfo)
    sdk::log_info(settings_.name + ": the reward function's further output (stdout and stderr) is logged at debug level");
}

void WorkerPool::log_once(const std::string& key, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (logged_.size() >= 1000 || !logged_.insert(key).second) return;
  }
  sdk::log_warn(message);
}

bool WorkerPool::await_ready(Worker& w, double timeout_s, std::string* error) {
  const auto deadline = after(timeout_s);
  for (;;) {
    if (shutting_down_.load()) {
      *error = settings_.name + ": the verifier is shutting down";
      return false;
    }
    const double left = seconds_until(deadline);
    if (left <= 0) {
      *error = settings_.name + ": a Python worker did not finish importing within " + number_text(timeout_s) + " s";
      if (!w.err_tail.empty()) *error += "; its output:\n" + w.err_tail;
      return false;
    }
    pollfd fds[2] = {{w.proc->stdout_fd(), POLLIN, 0}, {w.proc->stderr_fd(), POLLIN, 0}};
    const int r = poll(fds, w.proc->stderr_fd() >= 0 ? 2 : 1, static_cast<int>(std::min(left, 0.5) * 1000) + 1);
    if (r < 0 && errno != EINTR) {
      *error = settings_.name + ": poll failed: " + std::strerror(errno);
      return false;
    }
    drain_stderr(w);
    Lines lines;
    const bool open = w.out.read(w.proc->stdout_fd(), &lines);
    for (const LineReader::Line& line : lines) {
      const json msg = line.cut ? json() : json::parse(line.text, nullptr, false);
      if (msg.is_object() && msg.contains("ready")) return true;
      if (msg.is_object() && msg.contains("fatal")) {
        *error = settings_.name + ": " + msg.value("fatal", std::string()) + "\n" + msg.value("tb", std::string());
        return false;
      }
      *error = settings_.name + ": a Python worker wrote, before it was ready, what is not the protocol: " +
               preview(line.text) + (line.cut ? " (a line over " + std::to_string(kMaxAnswerBytes) + " bytes)" : "");
      return false;
    }
    if (!open) {
      // The protocol closed: the interpreter is exiting (or closed it and runs on: killed).
      for (int i = 0; i < 100 && !w.proc->reap(false); ++i) usleep(10000);
      w.proc->kill();
      w.proc->reap(true);
      drain_stderr(w);
      *error = settings_.name + ": the Python worker exited while starting (" +
               (w.proc->signal() ? "killed by " + signal_name(w.proc->signal())
                                 : "exit status " + std::to_string(w.proc->exit_code())) +
               ")" + (w.err_tail.empty() ? std::string() : "; its output:\n" + w.err_tail);
      return false;
    }
  }
}

// ------------------------------------------------------------------------------ scoring

RowOutcome WorkerPool::score(std::string row_json) {
  auto r = std::make_shared<Request>();
  r->row = std::move(row_json);
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) {
    RowOutcome out;
    out.error = "not scored: the python_reward verifier is shutting down";
    return out;
  }
  queue_.push_back(r);
  work_.notify_one();
  r->cv.wait(lock, [&] { return r->done; });
  return std::move(r->outcome);
}

void WorkerPool::settle(const std::shared_ptr<Request>& r, RowOutcome outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  r->done = true;
  r->outcome = std::move(outcome);
  r->cv.notify_one();
}

void WorkerPool::requeue_front(std::vector<std::shared_ptr<Request>> requests, bool alone, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
      auto& r = *it;
      // Every fault fails the row at fault (or splits a TRL batch), so requeued rows always
      // make progress: they wait as long as it takes.
      if (stopping_) {
        r->done = true;
        r->outcome.kind = RowOutcome::Kind::kError;
        r->outcome.error = "not scored: the python_reward verifier is shutting down (its batch was interrupted: " + why + ")";
        r->cv.notify_one();
        continue;
      }
      r->alone = r->alone || alone;
      queue_.push_front(r);
    }
  }
  work_.notify_all();
}

void WorkerPool::restart(Worker& w, const std::string& why) {
  if (w.proc) {
    w.proc->kill();
    w.proc->finish();
  }
  w.proc.reset();
  w.out.reset();
  w.err.reset();
  w.err_tail.clear();
  if (shutting_down_.load()) return;
  // One warning per kind of fault; the rows' details carry every occurrence.
  log_once("restart:" + why.substr(0, why.find(" (")),
           settings_.name + ": worker " + std::to_string(w.index) + " " + why +
               "; it is restarted (this warning is shown once per kind of fault)");
}

void WorkerPool::worker_main(Worker& w) {
  const grpo_sandbox::SigpipeGuard no_sigpipe;  // the interpreter may die while we write
  {
    std::string error;
    w.proc = start_process(&error);
    if (w.proc && !await_ready(w, settings_.start_timeout_s, &error)) {
      w.proc->finish();
      w.proc.reset();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    w.start_reported = true;
    w.start_error = error;
    started_.notify_all();
  }
  for (;;) {
    std::vector<std::shared_ptr<Request>> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!stopping_ && queue_.empty()) {
        work_.wait_for(lock, std::chrono::milliseconds(200));
        if (!stopping_ && queue_.empty() && w.proc) {  // idle: keep its stderr pipe from filling
          lock.unlock();
          drain_stderr(w);
          lock.lock();
        }
      }
      if (stopping_) return;
      if (queue_.front()->alone) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      } else {
        while (!queue_.empty() && !queue_.front()->alone && batch.size() < settings_.batch_size) {
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
      }
    }
    if (w.proc && w.proc->reap(false)) {
      // It died between batches (a thread of the reward's, the memory limit): no row of this
      // batch was sent to it, so none is blamed.
      drain_stderr(w);
      restart(w, std::string("exited while idle (") +
                     (w.proc->signal() ? signal_name(w.proc->signal()) : "status " + std::to_string(w.proc->exit_code())) +
                     ")");
    }
    if (!w.proc) {
      std::string error;
      w.proc = start_process(&error);
      if (w.proc && !await_ready(w, settings_.start_timeout_s, &error)) {
        w.proc->finish();
        w.proc.reset();
      }
      if (!w.proc) {
        log_once("start:" + error, error);
        for (auto& r : batch) {
          RowOutcome out;
          out.error = "not scored: " + error;
          settle(r, std::move(out));
        }
        continue;
      }
    }
    run_batch(w, batch);
  }
}

bool WorkerPool::row_outcome(const json& msg, RowOutcome* out) {
  if (const auto s = msg.find("s"); s != msg.end() && s->is_number()) {
    out->kind = RowOutcome::Kind::kScore;
    out->score = s->get<double>();
    if (const auto d = msg.find("d"); d != msg.end()) out->details = d->dump(-1, ' ', false, json::error_handler_t::replace);
  } else if (msg.contains("none")) {
    out->kind = RowOutcome::Kind::kNotApplicable;
  } else if (const auto nf = msg.find("nonfinite"); nf != msg.end() && nf->is_string()) {
    out->kind = RowOutcome::Kind::kNonFinite;
    out->error = nf->get<std::string>();
  } else if (const auto e = msg.find("error"); e != msg.end() && e->is_string()) {
    out->kind = RowOutcome::Kind::kError;
    out->error = e->get<std::string>();
    const std::string where = msg.value("where", std::string());
    if (!where.empty()) out->error += " (" + where + ")";
    const std::string tb = msg.value("tb", std::string());
    if (!tb.empty())
      log_once("error:" + out->error.substr(0, out->error.find(':')) + "@" + where,
               settings_.name + " raised " + out->error +
                   "; the traceback (logged once per distinct error; every row it fails scores 0):\n" + tb);
  } else {
    return false;
  }
  return true;
}

// Long because it is one batch's whole exchange: send the rows, take the answers as they come
// under the per-row deadline, and sort out, on a fault, which rows fail and which go back.
void WorkerPool::run_batch(Worker& w, std::vector<std::shared_ptr<Request>>& batch) {
  std::size_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = ++next_batch_id_;
  }
  std::string line = "{\"id\":" + std::to_string(id) + ",\"rows\":[";
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (i) line += ',';
    line += batch[i]->row;
  }
  line += "]}\n";

  const std::size_t n = batch.size();
  std::vector<bool> answered(n, false);
  bool batch_failed = false;
  std::string batch_error;
  const std::string timeout_text = "timed out after " + number_text(settings_.timeout_s) + " s (timeout_s" +
                                   std::string(settings_.trl ? ", one call on the batch" : ", per row") + ")";

  // A fault of the interpreter: the row it was on fails (a time-out counts as one, not as an
  // error), the rows it had not reached go back.
  auto fault = [&](const std::string& what, bool timed_out = false) {
    w.proc->kill();
    w.proc->reap(true);
    drain_stderr(w);  // what it wrote before it died: a segfault's message, a MemoryError
    const grpo_sandbox::CgroupLeaf::Outcome leaf = w.proc->finish();
    std::string why = what;
    if (leaf.oom_killed) {
      why = "was killed by its memory limit (memory_mb)";
      timed_out = false;
    }
    if (!w.err_tail.empty()) why += " (its last output: " + preview(w.err_tail, 300) + ")";
    std::vector<std::shared_ptr<Request>> open;
    for (std::size_t i = 0; i < n; ++i)
      if (!answered[i]) open.push_back(batch[i]);
    if (settings_.trl && open.size() > 1) {
      requeue_front(open, /*alone=*/true, why);  // one call per row finds the rows at fault
    } else if (!open.empty()) {
      RowOutcome out;
      out.kind = timed_out ? RowOutcome::Kind::kTimeout : RowOutcome::Kind::kError;
      out.error = "the Python worker " + why;
      settle(open.front(), std::move(out));
      open.erase(open.begin());
      requeue_front(std::move(open), /*alone=*/false, why);
    }
    restart(w, what);
  };
  auto exited_text = [&]() {
    // The protocol closed: the interpreter is exiting; give it a moment to be reaped.
    for (int i = 0; i < 100 && !w.proc->reap(false); ++i) usleep(10000);
    if (!w.proc->reap(false)) return std::string("closed its protocol channel");
    if (w.proc->signal()) return "was killed by " + signal_name(w.proc->signal());
    return "exited with status " + std::to_string(w.proc->exit_code());
  };

  auto deadline = after(settings_.timeout_s);
  // 1. The batch, written under the deadline (a worker that stopped reading is hung).
  std::size_t written = 0;
  while (written < line.size()) {
    const double left = seconds_until(deadline);
    if (left <= 0) return fault(timeout_text, /*timed_out=*/true);
    pollfd fds[1] = {{w.proc->stdin_fd(), POLLOUT, 0}};
    if (poll(fds, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1) < 0 && errno != EINTR)
      return fault(std::string("could not be written to: ") + std::strerror(errno));
    const ssize_t wr = write(w.proc->stdin_fd(), line.data() + written, line.size() - written);
    if (wr > 0) written += static_cast<std::size_t>(wr);
    else if (wr < 0 && errno != EAGAIN && errno != EINTR) return fault(exited_text());
    drain_stderr(w);
  }

  // 2. The answers, one line per row, then {"done": id}.
  for (;;) {
    const double left = seconds_until(deadline);
    if (left <= 0) return fault(timeout_text, /*timed_out=*/true);
    if (shutting_down_.load()) return fault("was stopped: the verifier is shutting down");
    pollfd fds[2] = {{w.proc->stdout_fd(), POLLIN, 0}, {w.proc->stderr_fd(), POLLIN, 0}};
    const int r = poll(fds, w.proc->stderr_fd() >= 0 ? 2 : 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
    if (r < 0 && errno != EINTR) return fault(std::string("could not be polled: ") + std::strerror(errno));
    if (r <= 0) continue;
    drain_stderr(w);
    // The lines read together with the end of the stream count too: a worker's last answer and
    // its exit often arrive in one read, and that answer must not be lost (its row would be
    // blamed for the exit of the row after it).
    Lines lines;
    const bool open = w.out.read(w.proc->stdout_fd(), &lines);
    for (const LineReader::Line& line : lines) {
      if (line.cut)  // the driver's lines fit: the function wrote into the protocol channel
        return fault("wrote more than " + std::to_string(kMaxAnswerBytes) +
                     " bytes without a line break into its protocol channel (the limit of one answer)");
      const std::string& text = line.text;
      const json msg = json::parse(text, nullptr, false);
      auto garbage = [&] {
        fault("wrote what is not the protocol: \"" + preview(text) + "\"");
      };
      if (!msg.is_object()) return garbage();
      if (const auto it = msg.find("i"); it != msg.end()) {
        if (!it->is_number_unsigned() || it->get<std::size_t>() >= n || answered[it->get<std::size_t>()]) return garbage();
        const std::size_t i = it->get<std::size_t>();
        RowOutcome out;
        if (!row_outcome(msg, &out)) return garbage();
        answered[i] = true;
        settle(batch[i], std::move(out));
        deadline = after(settings_.timeout_s);  // the next row's time starts now
      } else if (const auto be = msg.find("batch_error"); be != msg.end() && be->is_string()) {
        batch_failed = true;
        batch_error = be->get<std::string>();
        const std::string where = msg.value("where", std::string());
        if (!where.empty()) batch_error += " (" + where + ")";
        log_once("error:" + batch_error.substr(0, batch_error.find(':')) + "@" + where,
                 settings_.name + " raised " + batch_error +
                     "; the traceback (logged once per distinct error):\n" + msg.value("tb", std::string()));
      } else if (const auto done = msg.find("done"); done != msg.end()) {
        if (!done->is_number_unsigned() || done->get<std::size_t>() != id) return garbage();
        std::vector<std::shared_ptr<Request>> rest;
        for (std::size_t i = 0; i < n; ++i)
          if (!answered[i]) rest.push_back(batch[i]);
        if (batch_failed && rest.size() > 1) {
          requeue_front(std::move(rest), /*alone=*/true, batch_error);  // find the rows that raise
        } else {
          for (auto& req : rest) {
            RowOutcome out;
            out.error = batch_failed ? batch_error : "the Python worker sent no answer for this row";
            settle(req, std::move(out));
          }
        }
        return;
      } else {
        return garbage();
      }
    }
    if (!open) return fault(exited_text());
  }
}

}  // namespace grpo_python_reward
