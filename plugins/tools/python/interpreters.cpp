#include "plugins/tools/python/interpreters.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <exception>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/text.h"

namespace grpo_python_tool {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kStderrTail = 1000;  // of the interpreter's own stderr, for fault reports

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_until(Clock::time_point t) { return std::chrono::duration<double>(t - Clock::now()).count(); }

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

using grpo_sandbox::LineReader;

}  // namespace

struct InterpreterPool::Session {
  explicit Session(std::size_t max_answer_bytes) : out(max_answer_bytes), err(kStderrTail) {}
  // Appends what the interpreter's own stderr holds now to err_tail, keeping its end.
  void drain_stderr();
  // Once its interpreter is gone: nothing it wrote reaches the next one's lines or start-up errors.
  void forget_output() {
    out.reset();
    err.reset();
    err_tail.clear();
  }

  Proc proc;
  LineReader out;          // the protocol: one answer line per cell
  LineReader err;          // the interpreter's own stderr (start-up errors)
  std::string err_tail;    // its last kStderrTail bytes
  std::string lost;        // why the previous interpreter is gone, told to the next call
  std::uint64_t last_used = 0;
  bool busy = false;       // a call is using it (never evicted then)
  bool ended = false;      // end() came while a call was still running
};

void InterpreterPool::Session::drain_stderr() {
  if (!proc || proc->stderr_fd() < 0) return;
  std::vector<LineReader::Line> lines;
  if (!err.read(proc->stderr_fd(), &lines)) {
    lines.emplace_back();
    if (!err.take_rest(&lines.back())) lines.pop_back();
    proc->close_stderr();
  }
  for (const LineReader::Line& line : lines) err_tail += line.text + (line.cut ? " [...]\n" : "\n");
  if (err_tail.size() > kStderrTail) err_tail.erase(0, err_tail.size() - kStderrTail);
}

InterpreterPool::InterpreterPool(const grpo_sandbox::Sandbox& sandbox, InterpreterSettings settings)
    : sandbox_(sandbox), settings_(std::move(settings)) {
  spawner_ = std::thread([this] { spawner_main(); });
}

InterpreterPool::~InterpreterPool() {
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sessions.swap(sessions_);
  }
  sessions.clear();  // kills the interpreters while the thread that started them still runs
  {
    std::lock_guard<std::mutex> lock(spawn_mutex_);
    spawn_stop_ = true;
  }
  spawn_cv_.notify_all();
  if (spawner_.joinable()) spawner_.join();
}

void InterpreterPool::spawner_main() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(spawn_mutex_);
      spawn_cv_.wait(lock, [&] { return spawn_stop_ || !spawn_jobs_.empty(); });
      if (spawn_jobs_.empty()) return;
      job = std::move(spawn_jobs_.front());
      spawn_jobs_.pop_front();
    }
    job();
  }
}

InterpreterPool::Proc InterpreterPool::start_on_spawner(std::string* error) {
  grpo_sandbox::SandboxCommand command;
  command.python_args = {"-c", settings_.driver_source, settings_.driver_config};
  command.reaper = true;  // long-lived: bwrap reaps the orphans of what the cells start
  std::promise<Proc> started;
  std::future<Proc> result = started.get_future();
  std::string why;
  {
    std::lock_guard<std::mutex> lock(spawn_mutex_);
    if (spawn_stop_) {
      *error = "the tool is shutting down";
      return nullptr;
    }
    spawn_jobs_.push_back([&] {
      try {
        started.set_value(sandbox_.start(command, settings_.limits, &why));
      } catch (...) {
        started.set_exception(std::current_exception());
      }
    });
  }
  spawn_cv_.notify_one();
  Proc proc;
  try {
    proc = result.get();
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!proc) {
    *error = why;
    return nullptr;
  }
  for (int fd : {proc->stdin_fd(), proc->stdout_fd(), proc->stderr_fd()}) fcntl(fd, F_SETFL, O_NONBLOCK);
  return proc;
}

bool InterpreterPool::await_ready(Session& s, double timeout_s, std::string* error) {
  const auto deadline = after(timeout_s);
  for (;;) {
    const double left = seconds_until(deadline);
    if (left <= 0) {
      *error = "the interpreter did not start within " + number_text(timeout_s) + " s";
      return false;
    }
    pollfd fds[2] = {{s.proc->stdout_fd(), POLLIN, 0}, {s.proc->stderr_fd(), POLLIN, 0}};
    if (poll(fds, s.proc->stderr_fd() >= 0 ? 2 : 1, static_cast<int>(std::min(left, 0.2) * 1000) + 1) < 0 &&
        errno != EINTR) {
      *error = std::string("poll failed: ") + std::strerror(errno);
      return false;
    }
    s.drain_stderr();
    std::vector<LineReader::Line> lines;
    const bool open = s.out.read(s.proc->stdout_fd(), &lines);
    if (!lines.empty()) {
      const json msg = json::parse(lines[0].text, nullptr, false);
      if (!lines[0].cut && msg.is_object() && msg.value("ready", false)) return true;
      *error = "the interpreter wrote, before it was ready, what is not the protocol: " +
               grpo::sdk::clip_utf8(lines[0].text, 200);
      return false;
    }
    if (!open) {
      for (int i = 0; i < 100 && !s.proc->reap(false); ++i) usleep(10000);
      s.drain_stderr();
      *error = "the interpreter exited while starting" +
               (s.err_tail.empty() ? std::string() : ": " + grpo::sdk::clip_utf8(s.err_tail, kStderrTail));
      return false;
    }
  }
}

void InterpreterPool::lose(Session& s, const std::string& why) {
  if (s.proc) {
    s.proc->kill();
    s.proc->finish();  // frees its sandbox slot before live_ says so
    s.proc.reset();
  }
  s.forget_output();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.lost = why;
    --live_;
  }
  idle_.notify_all();
}

// Long because it is one cell's whole exchange under the deadline: the request written, the
// answer read, and each way the interpreter can fail turned into an outcome.
void InterpreterPool::run_cell(Session& s, const std::string& code, double timeout_s, Outcome* outcome) {
  const std::string request = json{{"code", code}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  const auto deadline = after(timeout_s);
  auto fault = [&](const std::string& what) {
    s.proc->kill();
    s.proc->reap(true);
    const grpo_sandbox::CgroupLeaf::Outcome leaf = s.proc->finish();
    const std::string why = leaf.oom_killed ? "ran out of memory (memory_mb)" : what;
    outcome->killed = why;
    outcome->state_lost_now = true;
    lose(s, why);
  };
  auto exited = [&]() {
    for (int i = 0; i < 100 && !s.proc->reap(false); ++i) usleep(10000);
    if (!s.proc->reap(false)) return std::string("closed its protocol channel");
    if (s.proc->signal()) return "was killed by signal " + std::to_string(s.proc->signal());
    return "exited with status " + std::to_string(s.proc->exit_code());
  };
  auto timed_out = [&] {
    outcome->timed_out = true;
    outcome->state_lost_now = true;
    s.proc->kill();
    s.proc->finish();
    lose(s, "timed out after " + number_text(timeout_s) + " s");
  };

  std::size_t written = 0;
  while (written < request.size()) {
    const double left = seconds_until(deadline);
    if (left <= 0) return timed_out();
    pollfd p{s.proc->stdin_fd(), POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1) < 0 && errno != EINTR)
      return fault(std::string("could not be polled: ") + std::strerror(errno));
    const ssize_t wr = write(s.proc->stdin_fd(), request.data() + written, request.size() - written);
    if (wr > 0) written += static_cast<std::size_t>(wr);
    else if (wr < 0 && errno != EAGAIN && errno != EINTR) return fault(exited());
  }
  for (;;) {
    const double left = seconds_until(deadline);
    if (left <= 0) return timed_out();
    pollfd fds[2] = {{s.proc->stdout_fd(), POLLIN, 0}, {s.proc->stderr_fd(), POLLIN, 0}};
    const int r = poll(fds, s.proc->stderr_fd() >= 0 ? 2 : 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
    if (r < 0 && errno != EINTR) return fault(std::string("could not be polled: ") + std::strerror(errno));
    if (r <= 0) continue;
    s.drain_stderr();
    std::vector<LineReader::Line> lines;
    const bool open = s.out.read(s.proc->stdout_fd(), &lines);
    if (!lines.empty()) {
      if (lines[0].cut)  // an answer is at most 2 x max_chars characters: a cell wrote into the channel
        return fault("wrote more than " + std::to_string(settings_.max_answer_bytes) +
                     " bytes on one line of its protocol channel");
      const json msg = json::parse(lines[0].text, nullptr, false);
      if (!msg.is_object() || !msg.contains("exit") || !msg["exit"].is_number_integer() || lines.size() > 1 ||
          s.out.pending() > 0)
        return fault("wrote what is not the protocol");
      auto text = [&](const char* key) {
        const auto it = msg.find(key);
        return it != msg.end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      auto count = [&](const char* key) {
        const auto it = msg.find(key);
        return it != msg.end() && it->is_number_unsigned() ? it->get<std::size_t>() : std::size_t{0};
      };
      outcome->out = text("out");
      outcome->err = text("err");
      outcome->out_chars = count("out_chars");
      outcome->err_chars = count("err_chars");
      outcome->exit_code = msg["exit"].get<int>();
      return;
    }
    if (!open) return fault(exited());
  }
}

Outcome InterpreterPool::run(std::string_view trajectory_id, const std::string& code, double timeout_s) {
  const grpo_sandbox::SigpipeGuard no_sigpipe;  // the interpreter may die while we write
  const auto t0 = Clock::now();
  const auto deadline = after(timeout_s);
  Outcome outcome;
  std::shared_ptr<Session> s;
  std::vector<Proc> evicted;
  bool need_start = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    std::shared_ptr<Session>& entry = sessions_[std::string(trajectory_id)];
    if (!entry) entry = std::make_shared<Session>(settings_.max_answer_bytes);
    s = entry;
    // A call the host gave up on may still be running for this trajectory: wait for it.
    while (s->busy) {
      if (idle_.wait_until(lock, deadline) == std::cv_status::timeout && s->busy) {
        outcome.error = "the previous call of this trajectory is still running";
        return outcome;
      }
    }
    s->busy = true;
    if (!s->proc) {
      while (live_ >= settings_.max_interpreters) {
        Session* victim = nullptr;
        for (auto& kv : sessions_) {
          Session* other = kv.second.get();
          if (other->proc && !other->busy && (!victim || other->last_used < victim->last_used)) victim = other;
        }
        if (victim) {
          evicted.push_back(std::move(victim->proc));
          victim->forget_output();
          victim->lost = "was stopped to make room for another trajectory's (max_interpreters: " +
                         std::to_string(settings_.max_interpreters) + ")";
          --live_;
          break;
        }
        if (idle_.wait_until(lock, deadline) == std::cv_status::timeout && live_ >= settings_.max_interpreters) {
          s->busy = false;
          idle_.notify_all();
          outcome.error = "all " + std::to_string(settings_.max_interpreters) +
                          " Python interpreters (max_interpreters) stayed busy for the whole time limit";
          return outcome;
        }
      }
      ++live_;
      need_start = true;
    }
  }
  evicted.clear();  // killed outside the lock

  if (need_start) {
    std::string why;
    s->proc = start_on_spawner(&why);
    if (s->proc && await_ready(*s, settings_.start_timeout_s, &why)) {
      outcome.fresh = true;
      std::lock_guard<std::mutex> lock(mutex_);
      outcome.lost = std::move(s->lost);
      s->lost.clear();
    } else {
      const std::string previous = s->lost;
      lose(*s, previous);  // nothing was running yet: the earlier loss is still the one to tell
      outcome.error = "could not start a Python interpreter: " + why;
    }
  }
  if (s->proc) run_cell(*s, code, timeout_s, &outcome);

  Proc ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s->busy = false;
    s->last_used = ++clock_;
    if (s->ended && s->proc) {
      ended = std::move(s->proc);
      --live_;
    }
  }
  ended.reset();
  idle_.notify_all();
  outcome.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return outcome;
}

void InterpreterPool::end(std::string_view trajectory_id) {
  Proc proc;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sessions_.find(std::string(trajectory_id));
    if (it == sessions_.end()) return;
    if (it->second->busy) {
      it->second->ended = true;  // the running call stops it when it returns
    } else if (it->second->proc) {
      proc = std::move(it->second->proc);
      --live_;
    }
    sessions_.erase(it);
  }
  proc.reset();
  idle_.notify_all();
}

}  // namespace grpo_python_tool
