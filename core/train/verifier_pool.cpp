#include "core/train/verifier_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/util/strings.h"
#include "grpo/sdk/verifier.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// One worker thread's flag, shared with the calls it runs: set when the pool gives up on it.
struct WorkerControl {
  std::size_t id = 0;
  std::atomic<bool> abandoned{false};
};

// The calls of one score().
struct Batch {
  std::mutex mutex;
  std::condition_variable all_settled;  // pending reached 0
  std::size_t pending = 0;              // calls neither done nor timed out
};

// One verifier call. Owns copies of everything the verifier reads, so that a call that
// outlives its score() (timed out, still running) references nothing of the caller's.
struct Call {
  std::shared_ptr<const sdk::Verifier> verifier;
  std::shared_ptr<const std::string> prompt, metadata;  // shared by the calls of one group
  std::string completion, ground_truth, dataset;
  bool finished = true;
  bool unbounded = false;  // the verifier's ScoreRange is kUnbounded
  double timeout_s = 0.0;  // this call's limit (verifier_call_timeout)
  std::shared_ptr<Batch> batch;

  // Guarded by batch->mutex.
  enum class State { kQueued, kRunning, kDone, kTimedOut };
  State state = State::kQueued;
  Clock::time_point started;
  std::shared_ptr<WorkerControl> runner;
  double score = 0.0;
  std::string details;
  bool failed = false;
  bool timed_out = false;  // the verifier's own limit stopped it (sdk::VerifierTimeout)
};

// The job queue, shared by the pool and every worker (also the abandoned ones).
struct JobQueue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::shared_ptr<Call>> calls;
  bool stopping = false;
};

void run_call(Call& call, const std::shared_ptr<WorkerControl>& self) {
  Batch& batch = *call.batch;
  {
    std::lock_guard<std::mutex> lock(batch.mutex);
    if (call.state != Call::State::kQueued) return;  // settled without running (no worker left)
    call.state = Call::State::kRunning;
    call.started = Clock::now();
    call.runner = self;
  }
  sdk::VerifierInput input;
  input.prompt = *call.prompt;
  input.completion = call.completion;
  input.ground_truth = call.ground_truth;
  input.dataset = call.dataset;
  input.metadata = *call.metadata;
  input.finished = call.finished;
  double score = 0.0;
  std::string details;
  bool failed = false, timed_out = false;
  try {
    sdk::VerifierResult result = call.verifier->verify(input);
    if (std::isfinite(result.score) && (call.unbounded || (result.score >= 0.0 && result.score <= 1.0))) {
      score = result.score;
      details = std::move(result.details);
    } else {
      failed = true;
      details = "verifier returned score " + number_text(result.score) +
                (call.unbounded ? ", not a finite number" : ", outside [0, 1]");
      if (!result.details.empty()) details += "; details: " + result.details;
    }
  } catch (const sdk::VerifierTimeout& e) {
    failed = timed_out = true;
    details = e.what();
  } catch (const std::exception& e) {
    failed = true;
    details = e.what();
  } catch (...) {
    failed = true;
    details = "verifier threw a non-standard exception";
  }
  std::lock_guard<std::mutex> lock(batch.mutex);
  if (call.state != Call::State::kRunning) return;  // timed out meanwhile: the late result is dropped
  call.state = Call::State::kDone;
  call.score = score;
  call.details = std::move(details);
  call.failed = failed;
  call.timed_out = timed_out;
  if (--batch.pending == 0) batch.all_settled.notify_all();
}

void worker_loop(std::shared_ptr<JobQueue> queue, std::shared_ptr<WorkerControl> self) {
  for (;;) {
    std::shared_ptr<Call> call;
    {
      std::unique_lock<std::mutex> lock(queue->mutex);
      queue->ready.wait(lock, [&] { return queue->stopping || !queue->calls.empty(); });
      if (queue->stopping) return;
      call = std::move(queue->calls.front());
      queue->calls.pop_front();
    }
    run_call(*call, self);
    call.reset();
    // Replaced while stuck in that call: the pool no longer counts on this thread.
    if (self->abandoned.load()) return;
  }
}

}  // namespace

// ------------------------------------------------------------------------------ routing

bool verifier_name_matches(const std::string& configured_name, const std::string& label) {
  if (label.empty()) return false;
  if (configured_name == label) return true;
  const std::size_t slash = configured_name.rfind('/');
  return slash != std::string::npos && configured_name.compare(slash + 1, std::string::npos, label) == 0;
}

double verifier_call_timeout(const VerifierSlot& slot, double timeout_s, std::size_t threads) {
  if (slot.concurrent_calls <= threads || threads == 0) return timeout_s;
  const std::size_t waves = (std::min<std::size_t>(slot.concurrent_calls, kMaxVerifierThreads) + threads - 1) / threads;
  return timeout_s * static_cast<double>(waves);
}

bool slot_answers_to(const VerifierSlot& slot, const std::string& label) {
  if (label.empty()) return false;
  if (!slot.labels.empty()) return std::find(slot.labels.begin(), slot.labels.end(), label) != slot.labels.end();
  return verifier_name_matches(slot.name, label);
}

std::optional<std::size_t> format_verifier_slot(const std::vector<VerifierSlot>& verifiers, const RewardOptions& options) {
  if (options.format_verifier.empty()) return std::nullopt;
  for (std::size_t i = 0; i < verifiers.size(); ++i)
    if (verifier_name_matches(verifiers[i].name, options.format_verifier)) return i;
  return std::nullopt;
}

std::vector<std::size_t> selected_verifier_slots(const std::string& label, const std::vector<VerifierSlot>& verifiers,
                                                 const RewardOptions& options) {
  const std::optional<std::size_t> format = format_verifier_slot(verifiers, options);
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < verifiers.size(); ++i) {
    if (format && *format == i) continue;
    if (label.empty() || slot_answers_to(verifiers[i], label)) out.push_back(i);
  }
  return out;
}

void check_verifier_labels(const std::vector<Example>& examples, const std::vector<VerifierSlot>& verifiers,
                           const RewardOptions& options) {
  std::vector<std::string> names;
  std::vector<std::string> described;  // with their labels
  for (const auto& v : verifiers) {
    names.push_back(v.name);
    described.push_back(v.labels.empty() ? v.name : v.name + " (label: " + join(v.labels, ", ") + ")");
  }
  const std::string configured = described.empty() ? "none" : join(described, ", ");
  const std::optional<std::size_t> format = format_verifier_slot(verifiers, options);
  if (!options.format_verifier.empty() && !format)
    throw std::invalid_argument("reward.format_verifier \"" + options.format_verifier +
                                "\" names no configured verifier" + did_you_mean(options.format_verifier, names) +
                                "; configured verifiers: " + configured);
  if (verifiers.size() == (format ? 1u : 0u))
    throw std::invalid_argument(verifiers.empty()
                                    ? std::string("no verifiers are configured: add one under `verifiers` (e.g. exact_match)")
                                    : "the only configured verifier, \"" + verifiers[*format].name +
                                          "\", is reward.format_verifier; add a verifier that scores the answers");

  // Every unmatched label with its first row and row count, so one error reports them all.
  struct Unmatched {
    std::string first_row;
    std::size_t rows = 0;
  };
  std::map<std::string, Unmatched> unmatched;
  std::string first_label;
  std::map<std::string, bool> label_ok;  // cache: label -> selects something
  for (const Example& ex : examples) {
    if (ex.targets.empty()) throw std::invalid_argument(ex.where() + ": the row has no ground truth to verify");
    for (const VerificationTarget& t : ex.targets) {
      auto it = label_ok.find(t.label);
      if (it == label_ok.end()) it = label_ok.emplace(t.label, !selected_verifier_slots(t.label, verifiers, options).empty()).first;
      if (it->second) continue;
      if (unmatched.empty()) first_label = t.label;
      Unmatched& u = unmatched[t.label];
      if (u.rows++ == 0) u.first_row = ex.where();
      break;  // count the row once
    }
  }
  if (unmatched.empty()) return;
  std::vector<std::string> selectable;  // what a label may name
  for (std::size_t i = 0; i < verifiers.size(); ++i)
    if (!(format && *format == i)) {
      if (verifiers[i].labels.empty()) selectable.push_back(verifiers[i].name);
      else selectable.insert(selectable.end(), verifiers[i].labels.begin(), verifiers[i].labels.end());
    }
  const Unmatched& first = unmatched.at(first_label);
  std::string message = first.first_row + ": verifier label \"" + first_label +
                        "\" selects no configured verifier (verifier name not registered)" +
                        did_you_mean(first_label, selectable) + "; configured verifiers: " + configured;
  if (format) message += " (\"" + verifiers[*format].name + "\" is reward.format_verifier and is not selected by labels)";
  std::size_t rows = 0;
  std::vector<std::string> summary;
  for (const auto& [label, u] : unmatched) {
    rows += u.rows;
    summary.push_back("\"" + label + "\" (" + std::to_string(u.rows) + (u.rows == 1 ? " row, first " : " rows, first ") +
                      u.first_row + ")");
  }
  if (rows > 1) message += "; " + std::to_string(rows) + " rows have unmatched labels: " + join(summary, ", ");
  message += ". Configure a verifier with that name, or map the rows' labels to one";
  throw std::invalid_argument(message);
}

// ------------------------------------------------------------------------------ pool

namespace {

// One verifier call of a score(): which sample and verifier entry it is for.
struct Planned {
  std::size_t group, sample, slot;
  bool is_format;
  std::shared_ptr<Call> call;
};

// One planned call per (sample, target, selected verifier), then the format call.
std::vector<Planned> plan_calls(const std::vector<Group>& groups, const std::vector<std::string>& prompt_texts,
                                const std::vector<VerifierSlot>& verifiers, const RewardOptions& options,
                                const std::optional<std::size_t>& format, const std::shared_ptr<Batch>& batch,
                                const std::vector<double>& slot_timeouts) {
  std::vector<Planned> plan;
  std::map<std::string, std::vector<std::size_t>> routes;  // label -> selected slots
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const Example& ex = groups[gi].example;
    auto prompt = std::make_shared<const std::string>(prompt_texts[gi]);
    auto metadata = std::make_shared<const std::string>(ex.metadata);
    for (const VerificationTarget& t : ex.targets)
      if (!routes.count(t.label)) routes.emplace(t.label, selected_verifier_slots(t.label, verifiers, options));
    for (std::size_t si = 0; si < groups[gi].samples.size(); ++si) {
      const Sample& sample = groups[gi].samples[si];
      auto add = [&](std::size_t slot, const VerificationTarget* target, bool is_format) {
        auto call = std::make_shared<Call>();
        call->verifier = verifiers[slot].verifier;
        call->prompt = prompt;
        call->metadata = metadata;
        call->completion = sample.text;
        call->ground_truth = target ? target->ground_truth : std::string("null");
        call->dataset = target ? target->label : std::string();
        call->finished = sample.finished;
        call->unbounded = verifiers[slot].score_range == sdk::ScoreRange::kUnbounded;
        call->timeout_s = slot_timeouts[slot];
        call->batch = batch;
        plan.push_back({gi, si, slot, is_format, std::move(call)});
      };
      for (const VerificationTarget& t : ex.targets)
        for (std::size_t slot : routes.at(t.label)) add(slot, &t, false);
      if (format) add(*format, ex.targets.empty() ? nullptr : &ex.targets.front(), true);
    }
  }
  return plan;
}

// Every sample's verdicts, in plan order (every call is settled; late results of timed-out
// calls are ignored). Counts the failures and timeouts (the pool's and the verifiers' own);
// *first_failure names the first failure, *first_timeout the first time-out.
ScoringStats collect_verdicts(const std::vector<Planned>& plan, Batch& batch, std::vector<Group>& groups,
                              const std::vector<VerifierSlot>& verifiers, const std::string& timeout_text,
                              std::string* first_failure, std::string* first_timeout) {
  ScoringStats stats;
  stats.calls = plan.size();
  for (auto& g : groups)
    for (auto& s : g.samples) {
      s.verdicts.clear();
      s.verifier_reward = 0.0;
      s.correct = false;
    }
  std::lock_guard<std::mutex> lock(batch.mutex);
  for (const Planned& p : plan) {
    const Call& c = *p.call;
    VerifierVerdict v;
    v.verifier = verifiers[p.slot].name;
    v.weight = verifiers[p.slot].weight;
    if (c.state == Call::State::kTimedOut) {
      v.failed = v.timed_out = true;
      v.details = "timed out after " + number_text(c.timeout_s) + " s (" + timeout_text + ")";
    } else {
      v.score = c.score;
      v.failed = c.failed;
      v.timed_out = c.timed_out;
      v.details = c.details;
    }
    if (v.failed) {
      ++(v.timed_out ? stats.timeouts : stats.failures);
      std::string* first = v.timed_out ? first_timeout : first_failure;
      if (first->empty()) *first = v.verifier + " on " + groups[p.group].example.where() + ": " + v.details;
    }
    groups[p.group].samples[p.sample].verdicts.push_back(std::move(v));
  }
  return stats;
}

// Per sample: the verdicts are the non-format ones, then (when configured) the format one.
void combine_verdicts(std::vector<Group>& groups, bool with_format, const RewardOptions& options) {
  for (auto& g : groups)
    for (auto& s : g.samples) {
      const std::size_t n = s.verdicts.size() - (with_format && !s.verdicts.empty() ? 1 : 0);
      double reward = 0.0, raw = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        reward += s.verdicts[i].score * s.verdicts[i].weight * options.verification_reward;
        raw += s.verdicts[i].score;
      }
      bool correct = n > 0 && raw / static_cast<double>(n) >= 0.5;
      if (with_format && !s.verdicts.empty()) {
        const VerifierVerdict& f = s.verdicts.back();
        if (options.format_additive) {
          reward += f.score * f.weight * options.verification_reward;
        } else if (f.score < 0.5) {
          reward = 0.0;
          correct = false;
        }
      }
      s.verifier_reward = reward;
      s.correct = correct;
    }
}

}  // namespace


struct VerifierPool::Impl {
  std::shared_ptr<JobQueue> queue = std::make_shared<JobQueue>();
  mutable std::mutex workers_mutex;
  std::unordered_map<std::size_t, std::thread> workers;  // live (not abandoned) workers
  std::size_t next_id = 0;
  std::size_t abandoned = 0;

  // Starts one worker; false when the system refuses a thread. Caller holds workers_mutex.
  bool spawn_locked() {
    auto control = std::make_shared<WorkerControl>();
    control->id = next_id++;
    try {
      workers.emplace(control->id, std::thread(worker_loop, queue, control));
    } catch (const std::system_error& e) {
      spdlog::error("verifier pool: could not start a worker thread: {}", e.what());
      return false;
    }
    return true;
  }

  // Gives up on a worker stuck in a timed-out call: detaches it and starts a replacement.
  // Returns the number of live workers afterwards.
  std::size_t replace(std::size_t id) {
    std::lock_guard<std::mutex> lock(workers_mutex);
    auto it = workers.find(id);
    if (it != workers.end()) {
      it->second.detach();
      workers.erase(it);
      ++abandoned;
      spawn_locked();
    }
    return workers.size();
  }

  // Waits until every call of `plan` settled (done or timed out). Wakes at the earliest
  // deadline of a running call; a call that starts after a scan has its deadline at least
  // the shortest timeout later, so waking no later than that after each scan finds it in time.
  void wait_until_settled(Batch& batch, const std::vector<Planned>& plan, double shortest_timeout_s) {
    auto seconds = [](double s) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    const auto shortest = seconds(shortest_timeout_s);
    std::unique_lock<std::mutex> lock(batch.mutex);
    while (batch.pending > 0) {
      const auto now = Clock::now();
      auto wake = now + shortest;
      std::vector<std::size_t> stuck;  // worker ids
      for (const Planned& p : plan) {
        Call& c = *p.call;
        if (c.state != Call::State::kRunning) continue;
        const auto deadline = c.started + seconds(c.timeout_s);
        if (deadline <= now) {
          c.state = Call::State::kTimedOut;
          c.runner->abandoned.store(true);
          stuck.push_back(c.runner->id);
          --batch.pending;
        } else {
          wake = std::min(wake, deadline);
        }
      }
      if (!stuck.empty()) {
        lock.unlock();
        std::size_t live = 1;
        for (std::size_t id : stuck) live = replace(id);
        lock.lock();
        if (live == 0) {
          // No thread could be started in place of the stuck ones: settle the waiting calls.
          for (const Planned& p : plan)
            if (p.call->state == Call::State::kQueued) {
              p.call->state = Call::State::kDone;
              p.call->failed = true;
              p.call->details = "not run: no verifier worker thread could be started";
              --batch.pending;
            }
        }
        continue;
      }
      batch.all_settled.wait_until(lock, wake, [&] { return batch.pending == 0; });
    }
  }
};

VerifierPool::VerifierPool(std::size_t threads, double timeout_s)
    : threads_(threads ? threads : std::max(1u, std::thread::hardware_concurrency())),
      timeout_s_(timeout_s),
      impl_(std::make_unique<Impl>()) {
  if (!(std::isfinite(timeout_s) && timeout_s > 0))
    throw std::invalid_argument("verifier timeout must be a finite number of seconds > 0, got " + number_text(timeout_s));
  std::lock_guard<std::mutex> lock(impl_->workers_mutex);
  for (std::size_t i = 0; i < threads_; ++i)
    if (!impl_->spawn_locked()) break;
  if (impl_->workers.empty()) {
    throw std::runtime_error("verifier pool: could not start any worker thread");
  }
}

VerifierPool::~VerifierPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->queue->mutex);
    impl_->queue->stopping = true;
  }
  impl_->queue->ready.notify_all();
  std::lock_guard<std::mutex> lock(impl_->workers_mutex);
  // Only idle workers are left here: score() returns once each of its calls finished or timed
  // out, and timing out detaches the stuck worker.
  for (auto& [id, thread] : impl_->workers)
    if (thread.joinable()) thread.join();
}

std::size_t VerifierPool::abandoned_workers() const {
  std::lock_guard<std::mutex> lock(impl_->workers_mutex);
  return impl_->abandoned;
}

ScoringStats VerifierPool::score(std::vector<Group>& groups, const std::vector<std::string>& prompt_texts,
                                 const std::vector<VerifierSlot>& verifiers, const RewardOptions& options) {
  const auto start = Clock::now();
  if (prompt_texts.size() != groups.size())
    throw std::invalid_argument("VerifierPool::score: " + std::to_string(prompt_texts.size()) + " prompt texts for " +
                                std::to_string(groups.size()) + " groups");
  const std::optional<std::size_t> format = format_verifier_slot(verifiers, options);
  if (!options.format_verifier.empty() && !format)
    throw std::invalid_argument("reward.format_verifier \"" + options.format_verifier + "\" names no configured verifier");
  for (const VerifierSlot& slot : verifiers)
    if (!slot.verifier) throw std::invalid_argument("verifier \"" + slot.name + "\" (" + slot.key_path + ") is not constructed");

  // A verifier that batches concurrent calls needs that many in flight: blocked workers cost
  // a thread each, nothing more.
  std::size_t wanted = 0;
  for (const VerifierSlot& slot : verifiers) wanted = std::max<std::size_t>(wanted, slot.concurrent_calls);
  wanted = std::min(wanted, kMaxVerifierThreads);
  if (wanted > 0) {
    std::lock_guard<std::mutex> lock(impl_->workers_mutex);
    while (impl_->workers.size() < wanted)
      if (!impl_->spawn_locked()) break;
  }

  std::vector<double> slot_timeouts;
  double shortest = timeout_s_;
  for (const VerifierSlot& slot : verifiers) {
    slot_timeouts.push_back(verifier_call_timeout(slot, timeout_s_, threads_));
    shortest = std::min(shortest, slot_timeouts.back());
  }
  auto batch = std::make_shared<Batch>();
  const std::vector<Planned> plan = plan_calls(groups, prompt_texts, verifiers, options, format, batch, slot_timeouts);
  batch->pending = plan.size();
  if (!plan.empty()) {
    {
      std::lock_guard<std::mutex> lock(impl_->queue->mutex);
      for (const Planned& p : plan) impl_->queue->calls.push_back(p.call);
    }
    impl_->queue->ready.notify_all();
  }
  impl_->wait_until_settled(*batch, plan, shortest);

  std::string first_failure, first_timeout;
  const std::string timeout_text = "reward.timeout_s";
  ScoringStats stats = collect_verdicts(plan, *batch, groups, verifiers, timeout_text, &first_failure, &first_timeout);
  combine_verdicts(groups, format.has_value(), options);
  if (stats.failures || stats.timeouts) {
    std::string msg = "reward: " + std::to_string(stats.failures + stats.timeouts) + " of " +
                      std::to_string(stats.calls) + " verifier calls scored 0:";
    if (stats.failures) msg += " " + std::to_string(stats.failures) + " failed (first: " + first_failure + ")";
    if (stats.timeouts)
      msg += std::string(stats.failures ? "," : "") + " " + std::to_string(stats.timeouts) + " timed out (first: " +
             first_timeout + ")";
    spdlog::warn("{}", msg);
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace grpo::core
