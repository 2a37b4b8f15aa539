// The tool loop (core/tools): the runner's time limits and failures, and ToolRollout's turns,
// observations, masks and limits, over a scripted backend (recompute path) and the native
// engine (KV cache kept), whose trajectories must be the same.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/tokenizer/chat_template.h"
#include "core/tools/tool_rollout.h"
#include "core/tools/tool_runner.h"
#include "grpo/sdk/torch/rollout_backend.h"
#include "tests/support/build_plugins.h"
#include "tests/support/test_dir.h"
#include "tests/support/tool_task.h"

using namespace grpo;
using core::ToolJob;
using core::ToolOutcome;
using core::ToolRollout;
using core::ToolRolloutSettings;
using core::ToolRunner;
using core::ToolSlot;
using json = nlohmann::ordered_json;

namespace {

const char* kTextSchema = R"({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})";

// Answers its `text` argument.
class Echo : public sdk::Tool {
 public:
  std::string description() const override { return "Repeats the text."; }
  std::string parameters() const override { return kTextSchema; }
  sdk::ToolObservation call(std::string_view arguments, const sdk::ToolCallContext&) const override {
    return {json::parse(arguments)["text"].get<std::string>(), false, ""};
  }
};

// Never returns on its own: blocks until released (at the end of the test).
class Hang : public sdk::Tool {
 public:
  std::string description() const override { return "Hangs."; }
  std::string parameters() const override { return kTextSchema; }
  sdk::ToolObservation call(std::string_view, const sdk::ToolCallContext&) const override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++entered;
    cv_.wait(lock, [&] { return released_; });
    return {"late", false, ""};
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }
  mutable std::atomic<int> entered{0};

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool released_ = false;
};

class Boom : public sdk::Tool {
 public:
  std::string description() const override { return "Throws."; }
  std::string parameters() const override { return kTextSchema; }
  sdk::ToolObservation call(std::string_view, const sdk::ToolCallContext&) const override {
    throw std::runtime_error("kaboom");
  }
};

// Returns only when `n` calls are inside at once (or after 60 s, saying so): proves concurrency
// without timing anything.
class Rendezvous : public sdk::Tool {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  std::string description() const override { return "Meets."; }
  std::string parameters() const override { return kTextSchema; }
  sdk::ToolObservation call(std::string_view, const sdk::ToolCallContext&) const override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++inside_;
    cv_.notify_all();
    const bool met = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return inside_ >= n_; });
    return {met ? "met" : "alone", !met, ""};
  }

 private:
  int n_;
  mutable int inside_ = 0;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
};

ToolSlot slot(const std::string& name, std::shared_ptr<sdk::Tool> tool) {
  ToolSlot s;
  s.name = s.call_name = name;
  s.key_path = "tools";
  s.description = tool->description();
  s.parameters = tool->parameters();
  s.tool = std::move(tool);
  return s;
}

ToolJob job(std::size_t tag, std::shared_ptr<sdk::Tool> tool, const std::string& name, double timeout_s) {
  ToolJob j;
  j.tag = tag;
  j.tool = std::move(tool);
  j.tool_name = name;
  j.arguments = R"({"text": "hi"})";
  j.trajectory_id = "t" + std::to_string(tag);
  j.timeout_s = timeout_s;
  return j;
}

std::vector<ToolOutcome> take_all(ToolRunner& runner, std::size_t n) {
  std::vector<ToolOutcome> out;
  while (out.size() < n) {
    auto more = runner.take(true);
    if (more.empty()) break;
    for (auto& o : more) out.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end(), [](const ToolOutcome& a, const ToolOutcome& b) { return a.tag < b.tag; });
  return out;
}

}  // namespace

// A call past its limit is a time-out observation and its stuck worker is replaced: with one
// worker, the next call still runs.
TEST(ToolRunner, HangingCallTimesOutAndThePoolGoesOn) {
  auto hang = std::make_shared<Hang>();
  auto echo = std::make_shared<Echo>();
  ToolRunner runner(1);
  runner.submit(job(0, hang, "hang", 0.3));
  runner.submit(job(1, echo, "echo", 30));
  const auto out = take_all(runner, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].timed_out);
  EXPECT_TRUE(out[0].observation.is_error);
  EXPECT_EQ(out[0].observation.text, "Error: hang timed out after 0.3 s");
  EXPECT_FALSE(out[1].timed_out);
  EXPECT_EQ(out[1].observation.text, "hi");
  EXPECT_EQ(runner.abandoned_workers(), 1u);
  hang->release();
}

TEST(ToolRunner, ThrowingToolIsAnErrorObservation) {
  ToolRunner runner(2);
  runner.submit(job(0, std::make_shared<Boom>(), "boom", 30));
  const auto out = take_all(runner, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].threw);
  EXPECT_TRUE(out[0].observation.is_error);
  EXPECT_EQ(out[0].observation.text, "Error: boom failed: kaboom");
}

TEST(ToolRunner, CallsRunConcurrently) {
  auto meet = std::make_shared<Rendezvous>(4);
  ToolRunner runner(4);
  for (std::size_t i = 0; i < 4; ++i) runner.submit(job(i, meet, "meet", 120));
  const auto out = take_all(runner, 4);
  ASSERT_EQ(out.size(), 4u);
  for (const auto& o : out) EXPECT_EQ(o.observation.text, "met");
}

TEST(ToolRunner, TakeWithNothingQueuedReturnsAtOnce) {
  ToolRunner runner(1);
  EXPECT_TRUE(runner.take(true).empty());
}

namespace {

// A backend without generate_turns that plays one script per request: turn k of a sample
// answers script[k] (byte tokens of the text), or "" past the script's end. The turn is
// recognised by how many observations the prompt already holds (the host re-sends prompt +
// trajectory). Not a stand-in for the component under test: ToolRollout is.
class ScriptedBackend : public sdk::RolloutBackend {
 public:
  explicit ScriptedBackend(std::vector<std::vector<std::string>> scripts, std::string marker)
      : scripts_(std::move(scripts)), marker_(std::move(marker)) {}
  std::vector<sdk::GenerationResult> generate(const std::vector<sdk::GenerationRequest>& requests) override {
    const core::Tokenizer& tok = grpo::testing::tool_task_tokenizer();
    std::vector<sdk::GenerationResult> out;
    for (const auto& r : requests) {
      ++requests_seen;
      std::vector<int> ids(r.prompt_ids.begin(), r.prompt_ids.end());
      const std::string prompt = tok.decode(ids);
      const std::size_t script = static_cast<std::size_t>(prompt.at(0) - 'a');
      std::size_t turn = 0;
      for (std::size_t at = prompt.find(marker_); at != std::string::npos; at = prompt.find(marker_, at + 1)) ++turn;
      sdk::GenerationResult res;
      res.request_id = r.id;
      for (std::int64_t j = 0; j < r.n; ++j) {
        sdk::GeneratedSample g;
        const std::string text = turn < scripts_[script].size() ? scripts_[script][turn] : "done";
        for (int id : tok.encode(text)) g.token_ids.push_back(id);
        if (static_cast<std::int64_t>(g.token_ids.size()) > r.sampling.max_new_tokens) {
          g.token_ids.resize(static_cast<std::size_t>(r.sampling.max_new_tokens));
          g.finish_reason = sdk::FinishReason::kLength;
        }
        g.logprobs.assign(g.token_ids.size(), -0.25f);
        res.samples.push_back(std::move(g));
      }
      out.push_back(std::move(res));
    }
    return out;
  }
  void update_weights(const sdk::NamedTensors&) override {}
  int requests_seen = 0;

 private:
  std::vector<std::vector<std::string>> scripts_;
  std::string marker_;
};

sdk::GenerationRequest prompt_request(const std::string& text, std::int64_t max_new_tokens, std::int64_t n = 1) {
  sdk::GenerationRequest r;
  r.id = text;
  for (int id : grpo::testing::tool_task_tokenizer().encode(text)) r.prompt_ids.push_back(id);
  r.n = n;
  r.sampling.temperature = 0.0;
  r.sampling.max_new_tokens = max_new_tokens;
  r.seed = 1;
  return r;
}

std::string decode(const std::vector<std::int64_t>& ids, std::size_t from, std::size_t to) {
  return grpo::testing::tool_task_tokenizer().decode(std::vector<int>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(to)));
}

// The trajectory's runs of policy and observation tokens, decoded.
std::vector<std::pair<bool, std::string>> segments(const core::Trajectory& t) {
  std::vector<std::pair<bool, std::string>> out;
  for (std::size_t a = 0; a < t.token_ids.size();) {
    std::size_t b = a;
    while (b < t.token_ids.size() && t.policy_mask[b] == t.policy_mask[a]) ++b;
    out.emplace_back(t.policy_mask[a] == 1, decode(t.token_ids, a, b));
    a = b;
  }
  return out;
}

ToolRolloutSettings hermes_settings() {
  ToolRolloutSettings s;
  s.parser = core::ToolCallFormat::kHermes;
  s.max_calls = 5;
  s.timeout_s = 30;
  return s;
}

}  // namespace

// A malformed call is an error observation the policy reads, and the trajectory goes on: the
// next call runs, the turn without a call ends it. Observation tokens carry mask 0 and
// log-prob 0; the policy's keep the backend's.
TEST(ToolRollout, MalformedCallIsAnErrorObservationAndTheRolloutGoesOn) {
  std::vector<ToolSlot> tools{slot("echo", std::make_shared<Echo>())};
  ScriptedBackend backend({{"<tool_call>{bad json</tool_call>",
                            "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}</tool_call>", "done"}},
                          "<tool_response>");
  ToolRollout rollout(tools, hermes_settings(), grpo::testing::tool_task_tokenizer(), nullptr);
  const auto results = rollout.generate(backend, false, {prompt_request("a", 400)}, {"{}"});
  ASSERT_TRUE(results[0].status.is_ok());
  const core::Trajectory& t = results[0].samples.at(0);
  const std::vector<std::pair<bool, std::string>> expected = {
      {true, "<tool_call>{bad json</tool_call>"},
      {false, "<tool_response>\nError: the tool call is not valid JSON: {bad json\n</tool_response>\n"},
      {true, "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}</tool_call>"},
      {false, "<tool_response>\nhi\n</tool_response>\n"},
      {true, "done"}};
  EXPECT_EQ(segments(t), expected);
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_TRUE(t.calls[0].malformed);
  EXPECT_TRUE(t.calls[0].is_error);
  EXPECT_EQ(t.calls[1].tool, "echo");
  EXPECT_FALSE(t.calls[1].is_error);
  EXPECT_EQ(t.calls[1].observation, "hi");
  EXPECT_EQ(t.turns, 3);
  EXPECT_EQ(t.finish_reason, sdk::FinishReason::kStop);
  for (std::size_t i = 0; i < t.token_ids.size(); ++i) EXPECT_EQ(t.logprobs[i], t.policy_mask[i] ? -0.25f : 0.0f) << i;
  const auto& stats = rollout.last_stats();
  EXPECT_EQ(stats.calls, 2);
  EXPECT_EQ(stats.malformed, 1);
  EXPECT_EQ(stats.errors, 1);
  EXPECT_FALSE(stats.resumed_in_backend);
}

// A hanging tool and a throwing one give their samples error observations; the other samples
// of the same call are unaffected, and generate() returns.
TEST(ToolRollout, HangingAndCrashingToolsAreErrorObservations) {
  auto hang = std::make_shared<Hang>();
  std::vector<ToolSlot> tools{slot("echo", std::make_shared<Echo>()), slot("hang", hang), slot("boom", std::make_shared<Boom>())};
  auto call = [](const std::string& name) {
    return "<tool_call>{\"name\": \"" + name + "\", \"arguments\": {\"text\": \"x\"}}</tool_call>";
  };
  ScriptedBackend backend({{call("hang"), "after"}, {call("boom"), "after"}, {call("echo"), "after"}}, "<tool_response>");
  ToolRolloutSettings s = hermes_settings();
  s.timeout_s = 0.5;
  ToolRollout rollout(tools, s, grpo::testing::tool_task_tokenizer(), nullptr);
  const auto results = rollout.generate(backend, false, {prompt_request("a", 200), prompt_request("b", 200), prompt_request("c", 200, 3)},
                                        {"{}", "{}", "{}"});
  ASSERT_EQ(results.size(), 3u);
  const auto& hung = results[0].samples.at(0);
  ASSERT_EQ(hung.calls.size(), 1u);
  EXPECT_TRUE(hung.calls[0].timed_out);
  EXPECT_EQ(hung.calls[0].observation, "Error: hang timed out after 0.5 s");
  EXPECT_EQ(segments(hung).back(), std::make_pair(true, std::string("after")));
  const auto& crashed = results[1].samples.at(0);
  EXPECT_EQ(crashed.calls.at(0).observation, "Error: boom failed: kaboom");
  EXPECT_TRUE(crashed.calls.at(0).is_error);
  for (const auto& t : results[2].samples) {
    EXPECT_EQ(t.calls.at(0).observation, "x");
    EXPECT_FALSE(t.calls.at(0).is_error);
  }
  const auto& stats = rollout.last_stats();
  EXPECT_EQ(stats.timeouts, 1);
  EXPECT_EQ(stats.errors, 2);
  hang->release();
}

// rollout.tools.max_calls: a trajectory makes at most that many calls; the turn that calls
// again ends it (the call is not run).
TEST(ToolRollout, MaxCallsEndsTheTrajectory) {
  std::vector<ToolSlot> tools{slot("echo", std::make_shared<Echo>())};
  const std::string call = "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"again\"}}</tool_call>";
  ScriptedBackend backend({{call, call, call, call}}, "<tool_response>");
  ToolRolloutSettings s = hermes_settings();
  s.max_calls = 2;
  ToolRollout rollout(tools, s, grpo::testing::tool_task_tokenizer(), nullptr);
  const auto t = rollout.generate(backend, false, {prompt_request("a", 500)}, {"{}"})[0].samples.at(0);
  EXPECT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.turns, 3);
  EXPECT_EQ(segments(t).back(), std::make_pair(true, call));
}

// The request's max_new_tokens bounds the whole trajectory: an observation that leaves no room
// for one more sampled token is not appended and the trajectory ends at the length limit.
TEST(ToolRollout, TokenBudgetBoundsObservationsToo) {
  std::vector<ToolSlot> tools{slot("echo", std::make_shared<Echo>())};
  const std::string call = "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"a long observation text\"}}</tool_call>";
  ScriptedBackend backend({{call, "done"}}, "<tool_response>");
  const auto call_tokens = static_cast<std::int64_t>(grpo::testing::tool_task_tokenizer().encode(call).size());
  const auto observation_tokens =
      static_cast<std::int64_t>(grpo::testing::tool_task_tokenizer().encode("<tool_response>\na long observation text\n</tool_response>\n").size());
  ToolRollout rollout(tools, hermes_settings(), grpo::testing::tool_task_tokenizer(), nullptr);
  // Room for the call and the observation, not for one more token.
  const auto cut = rollout.generate(backend, false, {prompt_request("a", call_tokens + observation_tokens)}, {"{}"})[0].samples.at(0);
  EXPECT_EQ(static_cast<std::int64_t>(cut.token_ids.size()), call_tokens);
  EXPECT_EQ(cut.finish_reason, sdk::FinishReason::kLength);
  EXPECT_EQ(cut.observation_tokens, 0);
  // One token more: the observation goes in and the next turn gets exactly one token.
  const auto fits = rollout.generate(backend, false, {prompt_request("a", call_tokens + observation_tokens + 1)}, {"{}"})[0].samples.at(0);
  EXPECT_EQ(static_cast<std::int64_t>(fits.token_ids.size()), call_tokens + observation_tokens + 1);
  EXPECT_EQ(fits.observation_tokens, observation_tokens);
  EXPECT_EQ(segments(fits).back(), std::make_pair(true, std::string("d")));
}

// With a chat template, a hermes observation is the template's own tool turn. The expected
// text is Qwen2.5's, written out by hand from its template: the tool message goes under a
// `user` header, wrapped in <tool_response>, and the assistant turn that made the call is
// closed first (unless it already ended with <|im_end|>).
TEST(ToolRollout, HermesObservationsUseTheChatTemplatesToolTurn) {
  const std::string qwen25_like =
      "{%- for message in messages %}"
      "{%- if message.role == 'user' or message.role == 'system' or (message.role == 'assistant' and not message.tool_calls) %}"
      "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
      "{%- elif message.role == 'tool' %}"
      "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
      "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
      "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
      "{%- endif %}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  const core::ChatTemplate t = core::ChatTemplate::from_source(qwen25_like, "qwen2.5-like");
  std::vector<ToolSlot> tools{slot("echo", std::make_shared<Echo>())};
  ToolRollout rollout(tools, hermes_settings(), grpo::testing::tool_task_tokenizer(), &t);
  EXPECT_EQ(rollout.observation_text({"42"}, "</tool_call>"),
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(rollout.observation_text({"42"}, "<|im_end|>"),
            "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(rollout.observation_text({"1", "2"}, "<|im_end|>"),
            "\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  ToolRolloutSettings custom = hermes_settings();
  custom.observation = "[{output}]";
  ToolRollout wrapped(tools, custom, grpo::testing::tool_task_tokenizer(), &t);
  EXPECT_EQ(wrapped.observation_text({"1", "2"}, ""), "[1][2]");
  EXPECT_EQ(rollout.tool_schemas(),
            json::parse(std::string(R"([{"type": "function", "function": {"name": "echo", "description": "Repeats the text.", "parameters": )") +
                        kTextSchema + "}}]"));
}

namespace {

// The tool task's `calc` tool: adds two numbers written "A+B".
class Calc : public sdk::Tool {
 public:
  std::string description() const override { return "Adds."; }
  std::string parameters() const override {
    return R"({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]})";
  }
  sdk::ToolObservation call(std::string_view arguments, const sdk::ToolCallContext&) const override {
    const std::string e = json::parse(arguments)["expression"].get<std::string>();
    const std::size_t plus = e.find('+');
    if (plus == std::string::npos) return {"Error: not A+B", true, ""};
    return {std::to_string(std::stoll(e.substr(0, plus)) + std::stoll(e.substr(plus + 1))), false, ""};
  }
};

}  // namespace

// On the native engine, resuming a parked sample with its KV cache kept and re-sending prompt +
// trajectory as a new request give the same trajectories under greedy decoding, token for
// token, with the model actually calling the tool.
TEST(ToolRollout, KvCacheResumeEqualsRecomputeOnTheNativeEngine) {
  const std::string dir = grpo::testing::fresh_test_dir("tools");
  grpo::testing::make_tool_task_model(dir + "/model", 3);
  auto backend = grpo::testing::create_component<sdk::RolloutBackend>(
      "native", {{"model", dir + "/model", true}, {"max_num_seqs", "3"}}, "rollout.backend");
  ASSERT_TRUE(backend->supports_turns());
  std::vector<ToolSlot> tools{slot("calc", std::make_shared<Calc>())};
  ToolRolloutSettings s;
  s.parser = core::ToolCallFormat::kLegacy;
  s.timeout_s = 30;
  ToolRollout rollout(tools, s, grpo::testing::tool_task_tokenizer(), nullptr);
  std::vector<sdk::GenerationRequest> requests;
  std::mt19937_64 rng(17);
  for (int i = 0; i < 8; ++i) {
    auto r = prompt_request(grpo::testing::tool_task_problem(rng).prompt(), 60);
    r.sampling.stop_strings = rollout.stop_strings();
    requests.push_back(std::move(r));
  }
  const std::vector<std::string> metadata(requests.size(), "{}");
  const auto kept = rollout.generate(*backend, true, requests, metadata);
  EXPECT_TRUE(rollout.last_stats().resumed_in_backend);
  const std::int64_t kept_calls = rollout.last_stats().calls;
  const auto recomputed = rollout.generate(*backend, false, requests, metadata);
  EXPECT_FALSE(rollout.last_stats().resumed_in_backend);
  EXPECT_GE(kept_calls, 6) << "the warm-started model should call the tool on most prompts";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& a = kept[i].samples.at(0);
    const auto& b = recomputed[i].samples.at(0);
    EXPECT_EQ(a.token_ids, b.token_ids) << "prompt " << i << ": " << a.text << " vs " << b.text;
    EXPECT_EQ(a.policy_mask, b.policy_mask) << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (std::size_t k = 0; k < a.logprobs.size(); ++k) EXPECT_NEAR(a.logprobs[k], b.logprobs[k], 1e-4) << i << ":" << k;
    if (!a.calls.empty()) {
      EXPECT_NE(a.text.find("<output>\n"), std::string::npos) << a.text;
      EXPECT_EQ(a.calls[0].tool, "calc");
    }
  }
}

// The python tool plugin from inside trajectories: a fork bomb, a network connection, a write
// outside the sandbox and a 100 MB output flood run as calls of four samples beside a fifth,
// benign one, in the same generate(); each hostile call comes back as an observation, nothing
// escapes, the benign sample gets its answer, and the host (this process) is unaffected.
TEST(ToolRollout, HostileProgramsInsideTrajectoriesStayContained) {
  std::shared_ptr<sdk::Tool> python;
  try {
    python = grpo::testing::create_component<sdk::Tool>(
        "python", {{"timeout_s", "3"}, {"memory_mb", "512"}, {"max_processes", "16"}, {"max_output_chars", "2000"}}, "tools[0]");
  } catch (const sdk::ConfigError& e) {
    if (std::string(e.what()).find("sandbox does not work") != std::string::npos)
      GTEST_SKIP() << "bubblewrap cannot create namespaces on this machine: " << e.what();
    throw;
  }
  const std::string dir = grpo::testing::fresh_test_dir("tools");
  const std::string escaped = dir + "/escaped.txt";
  auto call = [](const std::string& code) {
    return "<tool_call>" + json{{"name", "python"}, {"arguments", {{"code", code}}}}.dump() + "</tool_call>";
  };
  ScriptedBackend backend({{call("import os\nwhile True:\n    os.fork()"), "after"},
                           {call("import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')"), "after"},
                           {call("open('" + escaped + "', 'w').write('out')\nprint('written')"), "after"},
                           {call("import sys\nsys.stdout.write('x' * 100_000_000)"), "after"},
                           {call("print(6 * 7)"), "after"}},
                          "<tool_response>");
  std::vector<ToolSlot> tools{slot("python", python)};
  ToolRolloutSettings s = hermes_settings();
  s.timeout_s = 20;
  ToolRollout rollout(tools, s, grpo::testing::tool_task_tokenizer(), nullptr);
  std::vector<sdk::GenerationRequest> requests;
  for (const char* p : {"a", "b", "c", "d", "e"}) requests.push_back(prompt_request(p, 4000));
  const auto results = rollout.generate(backend, false, requests, std::vector<std::string>(5, "{}"));
  ASSERT_EQ(results.size(), 5u);
  for (const auto& r : results) {
    ASSERT_TRUE(r.status.is_ok());
    const auto& t = r.samples.at(0);
    ASSERT_EQ(t.calls.size(), 1u) << r.request_id;
    EXPECT_FALSE(t.calls[0].timed_out) << r.request_id << ": the tool's own limit ends it first";
    EXPECT_EQ(segments(t).back(), std::make_pair(true, std::string("after"))) << r.request_id;
  }
  EXPECT_TRUE(results[0].samples[0].calls[0].is_error) << results[0].samples[0].calls[0].observation;
  EXPECT_EQ(results[1].samples[0].calls[0].observation.find("connected"), std::string::npos) << results[1].samples[0].calls[0].observation;
  EXPECT_TRUE(results[1].samples[0].calls[0].is_error);
  EXPECT_FALSE(std::filesystem::exists(escaped));
  EXPECT_LE(results[3].samples[0].calls[0].observation.size(), 2200u);
  EXPECT_EQ(results[4].samples[0].calls[0].observation.substr(0, 2), "42") << results[4].samples[0].calls[0].observation;
  EXPECT_FALSE(results[4].samples[0].calls[0].is_error);
  // The tool still serves the next rollout.
  ScriptedBackend again({{call("print('still here')"), "after"}}, "<tool_response>");
  const auto next = rollout.generate(again, false, {prompt_request("a", 400)}, {"{}"});
  EXPECT_EQ(next[0].samples.at(0).calls.at(0).observation.substr(0, 10), "still here");
}
