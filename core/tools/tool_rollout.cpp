#include "core/tools/tool_rollout.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Stands for the assistant's turn when the chat template's tool turn is rendered.
constexpr const char* kTurnSentinel = "GRPO_TOOL_TURN_SENTINEL_7f3a";

std::atomic<std::uint64_t> g_generate_calls{0};

std::vector<int> as_int(const std::vector<std::int64_t>& ids) { return std::vector<int>(ids.begin(), ids.end()); }

// The seed of a recomputed turn: a function of the request's seed, the sample and the turn.
std::uint64_t turn_seed(std::uint64_t seed, std::int64_t sample, std::int64_t turn) {
  std::uint64_t x = seed ^ 0xD1B54A32D192ED03ULL;
  for (std::uint64_t v : {static_cast<std::uint64_t>(sample), static_cast<std::uint64_t>(turn)}) {
    x ^= v + 0x9E3779B97F4A7C15ULL + (x << 6) + (x >> 2);
    x *= 0xBF58476D1CE4E5B9ULL;
  }
  return x;
}

}  // namespace

// ----------------------------------------------------------------------------- Controller

class ToolRollout::Controller final : public sdk::TurnController {
 public:
  struct Traj {
    std::size_t request = 0;
    std::int64_t sample = 0;
    std::string id;
    std::int64_t budget = 0;  // the request's max_new_tokens: everything after the prompt
    Trajectory out;
    std::vector<ParsedToolCall> calls;  // of the current turn
    std::vector<std::optional<ToolOutcome>> outcomes;
    std::size_t waiting = 0;
    std::size_t first_record = 0;  // index into out.calls of the current turn's first call
    std::string ended_with;
    std::set<std::size_t> tools_used;  // indices into owner.tools_
  };

  Controller(ToolRollout& owner, const std::vector<sdk::GenerationRequest>& requests,
             const std::vector<std::string>& metadata)
      : owner_(owner), metadata_(metadata) {
    const std::uint64_t call = ++g_generate_calls;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      offsets_.push_back(trajs_.size());
      for (std::int64_t j = 0; j < std::max<std::int64_t>(requests[i].n, 0); ++j) {
        Traj t;
        t.request = i;
        t.sample = j;
        t.id = "g" + std::to_string(call) + "." + std::to_string(i) + "." + std::to_string(j);
        t.budget = requests[i].sampling.max_new_tokens;
        trajs_.push_back(std::move(t));
      }
    }
  }

  Traj& traj(std::size_t request, std::int64_t sample) { return trajs_.at(offsets_.at(request) + static_cast<std::size_t>(sample)); }
  std::vector<Traj>& trajectories() { return trajs_; }
  std::size_t undecided() const { return undecided_; }

  void turn_ended(const sdk::TurnEnd& end) override {
    Traj& t = traj(end.request, end.sample);
    ++undecided_;
    const sdk::GeneratedSample& o = *end.output;
    const std::size_t before = t.out.token_ids.size();
    t.out.token_ids.insert(t.out.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
    if (o.logprobs.size() == o.token_ids.size())
      t.out.logprobs.insert(t.out.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    else
      t.out.logprobs.resize(t.out.token_ids.size(), 0.0f);
    t.out.policy_mask.resize(t.out.token_ids.size(), 1);
    t.out.finish_reason = o.finish_reason;
    ++t.out.turns;
    t.calls.clear();
    t.outcomes.clear();
    t.waiting = 0;
    const std::int64_t used = static_cast<std::int64_t>(t.out.token_ids.size());
    const std::int64_t made = static_cast<std::int64_t>(t.out.calls.size());
    if (o.token_ids.empty() || used >= t.budget || made >= owner_.settings_.max_calls) return decide_finish(t);

    const std::vector<std::int64_t> turn(t.out.token_ids.begin() + static_cast<std::ptrdiff_t>(before), t.out.token_ids.end());
    core::DecodeOptions skip;
    skip.skip_special_tokens = true;
    const std::string text = owner_.tokenizer_.decode(as_int(turn), skip);
    std::vector<ParsedToolCall> calls = owner_.parser_.parse(text, o.finish_reason == sdk::FinishReason::kLength);
    if (calls.empty()) return decide_finish(t);
    const auto allowed = static_cast<std::size_t>(owner_.settings_.max_calls - made);
    if (calls.size() > allowed) calls.resize(allowed);
    t.ended_with = owner_.tokenizer_.decode({static_cast<int>(turn.back())});
    t.calls = std::move(calls);
    t.outcomes.assign(t.calls.size(), std::nullopt);
    t.first_record = t.out.calls.size();
    const std::size_t index = offsets_.at(end.request) + static_cast<std::size_t>(end.sample);
    for (std::size_t c = 0; c < t.calls.size(); ++c) {
      const ParsedToolCall& call = t.calls[c];
      ToolCallRecord record;
      record.tool = call.tool;
      record.arguments = call.arguments;
      t.out.calls.push_back(record);
      if (!call.error.empty()) {
        ToolOutcome bad;
        bad.observation = {call.error, true, ""};
        t.outcomes[c] = std::move(bad);
        t.out.calls.back().malformed = true;
        continue;
      }
      std::size_t tool_index = 0;
      while (owner_.tools_[tool_index].call_name != call.tool) ++tool_index;  // the parser checked the name
      t.tools_used.insert(tool_index);
      const ToolSlot& slot = owner_.tools_[tool_index];
      ToolJob job;
      job.tag = index * kMaxCallsPerTurn + c;
      job.tool = slot.tool;
      job.tool_name = slot.call_name;
      job.arguments = call.arguments;
      job.trajectory_id = t.id;
      job.call_index = static_cast<std::uint32_t>(t.first_record + c);
      job.metadata = metadata_.size() > end.request && !metadata_[end.request].empty() ? metadata_[end.request] : "{}";
      job.timeout_s = owner_.settings_.timeout_s;
      ++t.waiting;
      owner_.runner_.submit(std::move(job));
    }
    if (t.waiting == 0) complete_turn(t);
  }

  // resume_as_ready: whatever is ready (blocking for one when `wait`). Otherwise in waves: nothing
  // until the backend waits, then every parked sample's continuation at once, in (request,
  // sample) order, so that what the backend does never depends on how long a tool took.
  std::vector<sdk::TurnContinuation> continuations(bool wait) override {
    const bool as_ready = owner_.settings_.resume_as_ready;
    if (!as_ready && !wait) return {};
    absorb(owner_.runner_.take(false));
    while (wait && (as_ready ? ready_.empty() : ready_.size() < undecided_)) {
      std::vector<ToolOutcome> outcomes = owner_.runner_.take(true);
      if (outcomes.empty()) break;  // nothing queued or running: nothing will come
      absorb(std::move(outcomes));
    }
    std::vector<sdk::TurnContinuation> out;
    out.swap(ready_);
    std::sort(out.begin(), out.end(), [](const sdk::TurnContinuation& a, const sdk::TurnContinuation& b) {
      return std::make_pair(a.request, a.sample) < std::make_pair(b.request, b.sample);
    });
    undecided_ -= out.size();
    return out;
  }

  // Releases every tool's per-trajectory state.
  void end_trajectories() {
    for (const Traj& t : trajs_)
      for (std::size_t tool : t.tools_used)
        owner_.runner_.end_trajectory(owner_.tools_[tool].tool, t.id, owner_.settings_.timeout_s);
  }

 private:
  // Tags: trajectory index x this + call index within the turn (max_calls bounds the latter).
  static constexpr std::size_t kMaxCallsPerTurn = 1024;

  void absorb(std::vector<ToolOutcome> outcomes) {
    for (ToolOutcome& o : outcomes) {
      Traj& t = trajs_.at(o.tag / kMaxCallsPerTurn);
      const std::size_t c = o.tag % kMaxCallsPerTurn;
      if (c >= t.outcomes.size() || t.outcomes[c]) continue;  // not this turn's (cannot happen)
      t.outcomes[c] = std::move(o);
      if (--t.waiting == 0) complete_turn(t);
    }
  }

  void decide_finish(Traj& t) {
    sdk::TurnContinuation c;
    c.request = t.request;
    c.sample = t.sample;
    c.finish = true;
    ready_.push_back(std::move(c));
  }

  void complete_turn(Traj& t) {
    std::vector<std::string> outputs;
    for (std::size_t c = 0; c < t.calls.size(); ++c) {
      const ToolOutcome& o = *t.outcomes[c];
      ToolCallRecord& r = t.out.calls[t.first_record + c];
      r.observation = o.observation.text;
      r.is_error = o.observation.is_error || o.timed_out || o.threw || r.malformed;
      r.timed_out = o.timed_out;
      r.seconds = o.seconds;
      outputs.push_back(o.observation.text);
    }
    const std::string text = owner_.observation_text(outputs, t.ended_with);
    std::vector<int> ids = owner_.tokenizer_.encode(text);
    if (static_cast<std::int64_t>(ids.size()) > owner_.settings_.max_observation_tokens)
      ids.resize(static_cast<std::size_t>(owner_.settings_.max_observation_tokens));
    const std::int64_t room = t.budget - static_cast<std::int64_t>(t.out.token_ids.size());
    if (ids.empty() || static_cast<std::int64_t>(ids.size()) + 1 > room) {
      // No room for the observation and one more sampled token: the trajectory ends here.
      t.out.finish_reason = sdk::FinishReason::kLength;
      return decide_finish(t);
    }
    t.out.calls[t.first_record].observation_tokens = static_cast<std::int64_t>(ids.size());
    t.out.observation_tokens += static_cast<std::int64_t>(ids.size());
    t.out.token_ids.insert(t.out.token_ids.end(), ids.begin(), ids.end());
    t.out.logprobs.resize(t.out.token_ids.size(), 0.0f);
    t.out.policy_mask.resize(t.out.token_ids.size(), 0);
    sdk::TurnContinuation c;
    c.request = t.request;
    c.sample = t.sample;
    c.finish = false;
    c.append_ids.assign(ids.begin(), ids.end());
    c.max_new_tokens = room - static_cast<std::int64_t>(ids.size());
    ready_.push_back(std::move(c));
  }

  ToolRollout& owner_;
  const std::vector<std::string>& metadata_;
  std::vector<std::size_t> offsets_;  // per request: index of its first trajectory
  std::vector<Traj> trajs_;
  std::vector<sdk::TurnContinuation> ready_;
  std::size_t undecided_ = 0;  // turn ends without a continuation taken yet
};

// ----------------------------------------------------------------------------- ToolRollout

ToolRollout::ToolRollout(const std::vector<ToolSlot>& tools, ToolRolloutSettings settings, const Tokenizer& tokenizer,
                         const ChatTemplate* chat_template)
    : tools_(tools),
      settings_(std::move(settings)),
      tokenizer_(tokenizer),
      chat_template_(chat_template ? std::make_unique<ChatTemplate>(*chat_template) : nullptr),
      parser_(settings_.parser,
              [&] {
                std::vector<ToolSignature> signatures;
                for (const ToolSlot& t : tools) signatures.push_back({t.call_name, json::parse(t.parameters)});
                return signatures;
              }()),
      schemas_(core::tool_schemas(tools)),
      runner_(settings_.threads) {
  if (settings_.observation != "auto" && settings_.observation.find("{output}") == std::string::npos)
    throw std::invalid_argument("rollout.tools.observation: expected auto or a text with {output} in it, got '" +
                                settings_.observation + "'");
  if (settings_.max_calls < 1) throw std::invalid_argument("rollout.tools.max_calls must be >= 1");
}

json tool_schemas(const std::vector<ToolSlot>& tools) {
  if (tools.empty()) return nullptr;
  json out = json::array();
  for (const ToolSlot& t : tools)
    out.push_back({{"type", "function"},
                   {"function", {{"name", t.call_name}, {"description", t.description}, {"parameters", json::parse(t.parameters)}}}});
  return out;
}

std::unique_ptr<ToolRollout> make_tool_rollout(const std::vector<ToolSlot>& tools, const ToolRolloutSettings& settings,
                                               const std::string& chat_template, const Tokenizer& tokenizer) {
  if (tools.empty()) return nullptr;
  const ChatTemplate resolved = ChatTemplate::resolve(chat_template, tokenizer);
  const bool plain = resolved.builtin_name() == "none";
  try {
    return std::make_unique<ToolRollout>(tools, settings, tokenizer, plain ? nullptr : &resolved);
  } catch (const std::invalid_argument& e) {
    throw sdk::ConfigError(std::string("rollout.tools.parser: ") + e.what());
  }
}

ToolRollout::~ToolRollout() = default;

std::string ToolRollout::observation_text(const std::vector<std::string>& outputs, const std::string& turn_ended_with) const {
  std::string out;
  if (settings_.observation != "auto") {
    for (const std::string& o : outputs) {
      std::string w = settings_.observation;
      for (std::size_t at = w.find("{output}"); at != std::string::npos; at = w.find("{output}", at + o.size()))
        w.replace(at, 8, o);
      out += w;
    }
    return out;
  }
  if (settings_.parser == ToolCallFormat::kHermes && chat_template_) {
    try {
      json base = json::array({{{"role", "user"}, {"content", "?"}}, {{"role", "assistant"}, {"content", kTurnSentinel}}});
      ChatRenderOptions plain;
      plain.add_generation_prompt = false;
      plain.tools = schemas_;
      const std::string before = chat_template_->render_json(base, plain);
      json with = base;
      for (const std::string& o : outputs) with.push_back({{"role", "tool"}, {"content", o}});
      ChatRenderOptions next = plain;
      next.add_generation_prompt = true;
      const std::string after = chat_template_->render_json(with, next);
      const std::size_t sentinel = before.rfind(kTurnSentinel);
      if (sentinel != std::string::npos && after.compare(0, before.size(), before) == 0) {
        std::string tail = before.substr(sentinel + std::string(kTurnSentinel).size());
        // The turn's own end token (EOS) was generated already: do not add it twice.
        if (!turn_ended_with.empty() && tail.compare(0, turn_ended_with.size(), turn_ended_with) == 0)
          tail.erase(0, turn_ended_with.size());
        return tail + after.substr(before.size());
      }
    } catch (const std::exception& e) {
      spdlog::debug("tool observation: the chat template's tool turn failed ({}); using the parser's wrapping", e.what());
    }
  }
  for (const std::string& o : outputs) out += parser_.wrap_output(o);
  return out;
}

std::vector<ToolRolloutResult> ToolRollout::generate(sdk::RolloutBackend& backend, bool supports_turns,
                                                     const std::vector<sdk::GenerationRequest>& requests,
                                                     const std::vector<std::string>& metadata) {
  const auto t0 = Clock::now();
  stats_ = ToolRolloutStats{};
  std::vector<ToolRolloutResult> results(requests.size());
  Controller controller(*this, requests, metadata);
  const bool in_backend = supports_turns && settings_.reuse_kv_cache;
  stats_.resumed_in_backend = in_backend;
  if (in_backend) {
    std::vector<sdk::GenerationResult> raw = backend.generate_turns(requests, controller);
    if (raw.size() != requests.size())
      throw std::runtime_error("rollout backend returned " + std::to_string(raw.size()) + " results for " +
                               std::to_string(requests.size()) + " requests");
    for (std::size_t i = 0; i < requests.size(); ++i) {
      results[i].status = raw[i].status;
      if (!raw[i].status.is_ok()) continue;
      for (std::size_t j = 0; j < raw[i].samples.size(); ++j)
        if (raw[i].samples[j].token_ids != controller.traj(i, static_cast<std::int64_t>(j)).out.token_ids)
          throw std::runtime_error("rollout backend: the trajectory of request " + std::to_string(i) + " sample " +
                                   std::to_string(j) + " differs from the turns it reported");
    }
  } else {
    // Recompute: every turn is a request of its own (prompt + trajectory so far).
    std::vector<sdk::GenerationResult> first = backend.generate(requests);
    if (first.size() != requests.size())
      throw std::runtime_error("rollout backend returned " + std::to_string(first.size()) + " results for " +
                               std::to_string(requests.size()) + " requests");
    std::map<std::pair<std::size_t, std::int64_t>, std::int64_t> turn_of;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      results[i].status = first[i].status;
      if (!first[i].status.is_ok()) continue;
      for (std::size_t j = 0; j < first[i].samples.size(); ++j) {
        sdk::TurnEnd end{i, static_cast<std::int64_t>(j), 0, &first[i].samples[j]};
        controller.turn_ended(end);
        turn_of[{i, static_cast<std::int64_t>(j)}] = 0;
      }
    }
    while (controller.undecided() > 0) {
      std::vector<sdk::TurnContinuation> next = controller.continuations(true);
      std::vector<sdk::GenerationRequest> round;
      std::vector<std::pair<std::size_t, std::int64_t>> who;
      for (const sdk::TurnContinuation& c : next) {
        if (c.finish) continue;
        const sdk::GenerationRequest& r = requests[c.request];
        const Trajectory& so_far = controller.traj(c.request, c.sample).out;
        sdk::GenerationRequest q;
        q.id = r.id + "/" + std::to_string(c.sample);
        q.prompt_ids = r.prompt_ids;
        q.prompt_ids.insert(q.prompt_ids.end(), so_far.token_ids.begin(), so_far.token_ids.end());
        q.n = 1;
        q.sampling = r.sampling;
        q.sampling.max_new_tokens = c.max_new_tokens;
        const std::int64_t turn = ++turn_of[{c.request, c.sample}];
        if (r.seed) q.seed = turn_seed(*r.seed, c.sample, turn);
        round.push_back(std::move(q));
        who.emplace_back(c.request, c.sample);
      }
      if (round.empty()) continue;
      std::vector<sdk::GenerationResult> out = backend.generate(round);
      for (std::size_t k = 0; k < round.size(); ++k) {
        const auto [i, j] = who[k];
        sdk::GeneratedSample empty;  // a failed resume (no room in the model's context) ends the trajectory
        empty.finish_reason = sdk::FinishReason::kLength;
        const bool ok = k < out.size() && out[k].status.is_ok() && out[k].samples.size() == 1;
        if (!ok)
          spdlog::debug("tool rollout: resuming request {} sample {} failed: {}", i, j,
                        k < out.size() ? out[k].status.message() : std::string("no result"));
        sdk::TurnEnd end{i, j, turn_of[{i, j}], ok ? &out[k].samples[0] : &empty};
        controller.turn_ended(end);
      }
    }
  }
  controller.end_trajectories();

  for (auto& t : controller.trajectories()) {
    ToolRolloutResult& r = results[t.request];
    if (!r.status.is_ok()) continue;
    if (r.samples.size() <= static_cast<std::size_t>(t.sample)) r.samples.resize(static_cast<std::size_t>(t.sample) + 1);
    core::DecodeOptions skip;
    skip.skip_special_tokens = true;
    t.out.text = tokenizer_.decode(as_int(t.out.token_ids), skip);
    ++stats_.samples;
    stats_.observation_tokens += t.out.observation_tokens;
    for (const ToolCallRecord& c : t.out.calls) {
      ++stats_.calls;
      stats_.errors += c.is_error ? 1 : 0;
      stats_.timeouts += c.timed_out ? 1 : 0;
      stats_.malformed += c.malformed ? 1 : 0;
      stats_.tool_seconds += c.seconds;
    }
    r.samples[static_cast<std::size_t>(t.sample)] = std::move(t.out);
  }
  for (std::size_t i = 0; i < requests.size(); ++i) results[i].request_id = requests[i].id;
  stats_.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

}  // namespace grpo::core
