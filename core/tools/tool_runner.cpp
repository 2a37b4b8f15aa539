#include "core/tools/tool_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <thread>

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

struct ToolRunner::State {
  struct Running {
    ToolJob job;
    bool is_end = false;  // an end_trajectory job: no outcome
    Clock::time_point start, deadline;
    bool abandoned = false;
  };
  std::mutex mutex;
  std::condition_variable work_cv, done_cv;
  std::deque<std::pair<ToolJob, bool>> queue;  // (job, is_end)
  std::list<std::shared_ptr<Running>> running;
  std::vector<ToolOutcome> done;
  std::size_t abandoned = 0;
  bool stop = false;
};

namespace {

// One worker: takes jobs until stopped, or until it comes back from a call it was abandoned in.
void work(std::shared_ptr<ToolRunner::State> s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->work_cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping
    auto r = std::make_shared<ToolRunner::State::Running>();
    r->job = std::move(s->queue.front().first);
    r->is_end = s->queue.front().second;
    s->queue.pop_front();
    r->start = Clock::now();
    r->deadline = r->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r->job.timeout_s));
    s->running.push_back(r);
    s->done_cv.notify_all();  // a new deadline to watch
    lock.unlock();

    ToolOutcome out;
    out.tag = r->job.tag;
    if (r->is_end) {
      try {
        r->job.tool->end_trajectory(r->job.trajectory_id);
      } catch (...) {
      }
    } else {
      sdk::ToolCallContext context;
      context.trajectory_id = r->job.trajectory_id;
      context.call_index = r->job.call_index;
      context.timeout_s = r->job.timeout_s;
      context.metadata = r->job.metadata;
      try {
        out.observation = r->job.tool->call(r->job.arguments, context);
      } catch (const std::exception& e) {
        out.threw = true;
        out.observation = {std::string("Error: ") + r->job.tool_name + " failed: " + e.what(), true, ""};
      } catch (...) {
        out.threw = true;
        out.observation = {"Error: " + r->job.tool_name + " failed (unknown exception)", true, ""};
      }
    }
    out.seconds = std::chrono::duration<double>(Clock::now() - r->start).count();

    lock.lock();
    if (r->abandoned) return;  // replaced already; the outcome was a time-out
    s->running.remove(r);
    if (!r->is_end) s->done.push_back(std::move(out));
    s->done_cv.notify_all();
  }
}

}  // namespace

ToolRunner::ToolRunner(std::size_t threads) : state_(std::make_shared<State>()) {
  if (threads == 0) threads = std::max<std::size_t>(4, 4 * std::max(1u, std::thread::hardware_concurrency()));
  threads_ = threads;
  // Detached from the start: a worker holds the state by shared_ptr and exits when it is idle
  // and stopped, or when it returns from a call it was abandoned in.
  for (std::size_t i = 0; i < threads_; ++i) std::thread(work, state_).detach();
}

ToolRunner::~ToolRunner() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    state_->queue.clear();
  }
  state_->work_cv.notify_all();
}

void ToolRunner::submit(ToolJob job) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->queue.emplace_back(std::move(job), false);
  }
  state_->work_cv.notify_one();
}

void ToolRunner::end_trajectory(std::shared_ptr<const sdk::Tool> tool, std::string trajectory_id, double timeout_s) {
  ToolJob job;
  job.tool = std::move(tool);
  job.trajectory_id = std::move(trajectory_id);
  job.timeout_s = timeout_s;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->queue.emplace_back(std::move(job), true);
  }
  state_->work_cv.notify_one();
}

std::vector<ToolOutcome> ToolRunner::take(bool wait) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    // Deadlines: a call past its own is answered now and its worker replaced.
    const auto now = Clock::now();
    auto next_deadline = Clock::time_point::max();
    for (auto it = s.running.begin(); it != s.running.end();) {
      const auto& r = *it;
      if (now < r->deadline) {
        next_deadline = std::min(next_deadline, r->deadline);
        ++it;
        continue;
      }
      r->abandoned = true;
      ++s.abandoned;
      if (!r->is_end) {
        ToolOutcome out;
        out.tag = r->job.tag;
        out.timed_out = true;
        out.seconds = r->job.timeout_s;
        out.observation = {"Error: " + r->job.tool_name + " timed out after " + seconds_text(r->job.timeout_s) + " s",
                           true, ""};
        s.done.push_back(std::move(out));
      }
      std::thread(work, state_).detach();  // the stuck worker's replacement
      it = s.running.erase(it);
    }
    if (!s.done.empty() || !wait || (s.queue.empty() && s.running.empty())) {
      std::vector<ToolOutcome> out;
      out.swap(s.done);
      return out;
    }
    if (next_deadline == Clock::time_point::max())
      s.done_cv.wait(lock);
    else
      s.done_cv.wait_until(lock, next_deadline);
  }
}

std::size_t ToolRunner::abandoned_workers() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->abandoned;
}

}  // namespace grpo::core
