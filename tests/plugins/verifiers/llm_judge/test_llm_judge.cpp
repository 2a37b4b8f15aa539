// The llm_judge verifier, loaded the way a run loads it (PluginRegistry, the build's plugin
// folder), talking to a scripted stand-in for an OpenAI-compatible server: an httplib::Server
// on a free loopback port that records what it received and answers as each test says.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/plugins/verifiers/verifier_test_util.h"

namespace {

using namespace grpo::testing::verifier_tests;  // make, details, config_error, json, Option
using grpo::sdk::Verifier;
using grpo::sdk::VerifierInput;
using grpo::sdk::VerifierResult;
using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------ stand-in server

struct Received {
  std::string path;
  std::string body;
  std::string authorization;  // the Authorization header, "" when absent
};

// An OpenAI-compatible stand-in: every POST is recorded, then answered by `reply(n, req, res)`
// (n: 0 for the first request, 1 for the second, ...). stop() and join on destruction; a reply
// that waits (wait_or_released) is woken first, so no test waits for a slow handler to end.
class StandIn {
 public:
  using Reply = std::function<void(int n, const httplib::Request&, httplib::Response&)>;

  explicit StandIn(Reply reply) : reply_(std::move(reply)) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      int n = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        n = static_cast<int>(received_.size());
        received_.push_back({req.path, req.body, req.get_header_value("Authorization")});
      }
      const int now = ++in_flight_;
      int seen = max_in_flight_.load();
      while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
      }
      reply_(n, req, res);
      --in_flight_;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("the stand-in server cannot bind a loopback port");
    thread_ = std::thread([this] { server_.listen_after_bind(); });  // connections queue until then
    // stop() does nothing before listening has begun: wait for it, so the destructor can stop.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!server_.is_running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StandIn() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    server_.stop();
    thread_.join();
  }
  StandIn(const StandIn&) = delete;
  StandIn& operator=(const StandIn&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Received> received() const {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  std::size_t count() const { return received().size(); }
  json body(std::size_t i) const { return json::parse(received().at(i).body); }
  int max_in_flight() const { return max_in_flight_.load(); }

  // Sleeps `d` or until the server is being destroyed.
  void wait_or_released(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, d, [&] { return released_; });
  }

 private:
  Reply reply_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::vector<Received> received_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
};

json chat_answer(const std::string& content, const std::string& finish_reason = "stop") {
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion"},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", content}}},
                                    {"finish_reason", finish_reason}}})}};
}

json completion_answer(const std::string& text) {
  return {{"id", "cmpl-1"},
          {"object", "text_completion"},
          {"choices", json::array({{{"index", 0}, {"text", text}, {"finish_reason", "stop"}}})}};
}

void send(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

// Always the same chat answer.
StandIn::Reply always(const std::string& content) {
  return [content](int, const httplib::Request&, httplib::Response& res) { send(res, chat_answer(content)); };
}

// ------------------------------------------------------------------------------ helpers

std::vector<Option> with(const StandIn& server, std::vector<Option> extra = {}) {
  std::vector<Option> opts = {{"url", server.url(), true}, {"model", "judge-model", true}};
  opts.insert(opts.end(), extra.begin(), extra.end());
  return opts;
}

std::shared_ptr<Verifier> judge(const std::vector<Option>& opts) { return make("llm_judge", opts); }

VerifierResult ask(const Verifier& v, const std::string& completion, const std::string& ground_truth = "\"42\"",
                   const std::string& prompt = "What is six times seven?", const std::string& dataset = "arith") {
  VerifierInput in;
  in.prompt = prompt;
  in.completion = completion;
  in.ground_truth = ground_truth;
  in.dataset = dataset;
  in.metadata = "{}";
  return v.verify(in);
}

// The message of what `fn` throws, "" when it throws nothing.
template <class Fn>
std::string thrown(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A loopback port nothing listens on (bound, then closed).
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("cannot bind a loopback socket");
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ------------------------------------------------------------------------------ loading

TEST(LlmJudgePlugin, LoadsFromBuildDirTorchFree) {
  grpo::core::PluginInfo info = grpo::testing::build_plugin_registry().load_plugin("llm_judge");
  EXPECT_EQ(info.name, "llm_judge");
  ASSERT_EQ(info.components.size(), 1u);
  EXPECT_EQ(info.components[0].name, "llm_judge");
  EXPECT_EQ(info.components[0].kind, grpo::sdk::ComponentKind::kVerifier);
  EXPECT_FALSE(info.components[0].uses_torch);
}

TEST(LlmJudgePlugin, AsksForItsConcurrentCalls) {
  StandIn server(always("Score: 1"));
  EXPECT_EQ(judge(with(server))->concurrent_calls(), 16u);
  EXPECT_EQ(judge(with(server, {{"concurrent_calls", "3"}}))->concurrent_calls(), 3u);
  EXPECT_EQ(judge(with(server))->score_range(), grpo::sdk::ScoreRange::kUnit);
}

// ------------------------------------------------------------------------------ scoring

TEST(LlmJudgeScoring, ParsesAndScalesTheScoreAndSendsTheRenderedRubric) {
  StandIn server(always("The answer is right and clearly stated.\nScore: 7"));
  auto v = judge(with(server, {{"rubric", "Q={prompt}|A={completion}|GT={ground_truth}|D={dataset}|{{literal}}", true},
                               {"temperature", "0.25"},
                               {"seed", "1234"},
                               {"max_tokens", "64"}}));
  const VerifierResult r = ask(*v, "It is 42.");
  EXPECT_NEAR(r.score, 0.7, 1e-12);
  const json d = details(r);
  EXPECT_EQ(d["judge_score"], 7.0);
  EXPECT_NEAR(d["reward"].get<double>(), 0.7, 1e-12);
  EXPECT_EQ(d["cached"], false);
  EXPECT_EQ(d["clamped"], false);
  EXPECT_EQ(d["judge_output"], "The answer is right and clearly stated.\nScore: 7");

  ASSERT_EQ(server.count(), 1u);
  EXPECT_EQ(server.received()[0].path, "/v1/chat/completions");
  EXPECT_EQ(server.received()[0].authorization, "");
  const json body = server.body(0);
  EXPECT_EQ(body["model"], "judge-model");
  EXPECT_EQ(body["temperature"], 0.25);
  EXPECT_EQ(body["seed"], 1234);
  EXPECT_EQ(body["max_tokens"], 64);
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  // The ground truth "42" (a JSON string) appears unquoted; {{ }} are literal braces.
  EXPECT_EQ(body["messages"][0]["content"], "Q=What is six times seven?|A=It is 42.|GT=42|D=arith|{literal}");
}

TEST(LlmJudgeScoring, DefaultsAreGreedySeedZeroAndTheBuiltInRubric) {
  StandIn server(always("Score: 10"));
  auto v = judge(with(server));
  EXPECT_EQ(ask(*v, "It is 42.").score, 1.0);
  const json body = server.body(0);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["seed"], 0);
  EXPECT_EQ(body["max_tokens"], 256);
  const std::string content = body["messages"][0]["content"];
  EXPECT_TRUE(has(content, "What is six times seven?")) << content;
  EXPECT_TRUE(has(content, "It is 42.")) << content;
  EXPECT_TRUE(has(content, "\n42\n")) << content;
  EXPECT_TRUE(has(content, "Score: N")) << content;
  EXPECT_FALSE(has(content, "{completion}")) << content;
}

TEST(LlmJudgeScoring, SystemMessageComesFirst) {
  StandIn server(always("Score: 5"));
  auto v = judge(with(server, {{"system", "You are a strict grader.", true}}));
  EXPECT_EQ(ask(*v, "x").score, 0.5);
  const json body = server.body(0);
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][0]["content"], "You are a strict grader.");
  EXPECT_EQ(body["messages"][1]["role"], "user");
}

TEST(LlmJudgeScoring, NonStringGroundTruthIsShownAsWritten) {
  StandIn server(always("Score: 5"));
  auto v = judge(with(server, {{"rubric", "[{ground_truth}] {completion}", true}}));
  ask(*v, "a", "[1, \"two\"]");
  ask(*v, "b", "{\"k\": 3}");
  ask(*v, "c", "not json at all");
  ASSERT_EQ(server.count(), 3u);
  EXPECT_EQ(server.body(0)["messages"][0]["content"], "[[1, \"two\"]] a");
  EXPECT_EQ(server.body(1)["messages"][0]["content"], "[{\"k\": 3}] b");
  EXPECT_EQ(server.body(2)["messages"][0]["content"], "[not json at all] c");
}

TEST(LlmJudgeScoring, CompletionsEndpoint) {
  StandIn server([](int, const httplib::Request&, httplib::Response& res) {
    send(res, completion_answer(" Mostly wrong.\nScore: 3"));
  });
  auto v = judge(with(server, {{"endpoint", "completions"}, {"rubric", "Grade: {completion}\nVerdict:", true}}));
  const VerifierResult r = ask(*v, "It is 41.");
  EXPECT_NEAR(r.score, 0.3, 1e-12);
  ASSERT_EQ(server.count(), 1u);
  EXPECT_EQ(server.received()[0].path, "/v1/completions");
  const json body = server.body(0);
  EXPECT_EQ(body["prompt"], "Grade: It is 41.\nVerdict:");
  EXPECT_FALSE(body.contains("messages"));
  EXPECT_EQ(body["model"], "judge-model");
  EXPECT_EQ(body["max_tokens"], 256);
  EXPECT_EQ(details(r)["judge_output"], " Mostly wrong.\nScore: 3");
}

TEST(LlmJudgeScoring, UrlWithV1SuffixIsAccepted) {
  StandIn server(always("Score: 6"));
  auto v = judge({{"url", server.url() + "/v1", true}, {"model", "m", true}});
  EXPECT_NEAR(ask(*v, "x").score, 0.6, 1e-12);
  EXPECT_EQ(server.received().at(0).path, "/v1/chat/completions");
}

TEST(LlmJudgeScoring, TheLastMatchWins) {
  StandIn server(always("First impression, Score: 2. On reflection the proof holds.\nscore = 9"));
  auto v = judge(with(server));
  const VerifierResult r = ask(*v, "x");
  EXPECT_NEAR(r.score, 0.9, 1e-12);
  EXPECT_EQ(details(r)["judge_score"], 9.0);
}

TEST(LlmJudgeScoring, DecimalAndNegativeScores) {
  StandIn server([](int n, const httplib::Request&, httplib::Response& res) {
    send(res, chat_answer(n == 0 ? "Score: 7.5" : "Score: -1"));
  });
  auto v = judge(with(server, {{"min_score", "-5"}, {"max_score", "10"}}));
  EXPECT_NEAR(ask(*v, "a").score, 12.5 / 15.0, 1e-12);
  EXPECT_NEAR(ask(*v, "b").score, 4.0 / 15.0, 1e-12);
}

TEST(LlmJudgeScoring, OutOfRangeScoresAreClampedAndSaidSo) {
  StandIn server([](int n, const httplib::Request&, httplib::Response& res) {
    send(res, chat_answer(n == 0 ? "Score: 14" : n == 1 ? "Score: -3" : "Score: 4"));
  });
  auto v = judge(with(server));
  const VerifierResult high = ask(*v, "a");
  EXPECT_EQ(high.score, 1.0);
  EXPECT_EQ(details(high)["judge_score"], 14.0);
  EXPECT_EQ(details(high)["clamped"], true);
  EXPECT_TRUE(has(details(high)["reason"].get<std::string>(), "outside [0, 10]")) << high.details;
  const VerifierResult low = ask(*v, "b");
  EXPECT_EQ(low.score, 0.0);
  EXPECT_EQ(details(low)["clamped"], true);
  // A 1..5 scale: 4 -> 0.75.
  auto five = judge(with(server, {{"min_score", "1"}, {"max_score", "5"}}));
  EXPECT_NEAR(ask(*five, "c").score, 0.75, 1e-12);
}

TEST(LlmJudgeScoring, CustomScorePattern) {
  StandIn server(always("Verdict: mostly right. I give it 8/10, final."));
  auto v = judge(with(server, {{"score_pattern", R"(([0-9]+)\s*/\s*10)", true}}));
  EXPECT_NEAR(ask(*v, "x").score, 0.8, 1e-12);
}

TEST(LlmJudgeScoring, LongAnswersAreCutInDetails) {
  const std::string essay(2000, 'z');
  StandIn server(always(essay + "\nScore: 5"));
  auto v = judge(with(server));
  const std::string out = details(ask(*v, "x"))["judge_output"];
  EXPECT_LT(out.size(), 600u);
  EXPECT_TRUE(has(out, "more bytes]")) << out;
}

TEST(LlmJudgeScoring, RubricFromAFile) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("llm_judge_rubric_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "From a file: {completion} ({dataset})";
  StandIn server(always("Score: 2"));
  auto v = judge(with(server, {{"rubric_file", file.string(), true}}));
  EXPECT_NEAR(ask(*v, "x").score, 0.2, 1e-12);
  EXPECT_EQ(server.body(0)["messages"][0]["content"], "From a file: x (arith)");
  std::filesystem::remove(file);
}

TEST(LlmJudgeScoring, ApiKeyFromTheEnvironmentIsSentAsBearerToken) {
  ::setenv("GRPO_LLM_JUDGE_TEST_KEY", "sk-test-123", 1);
  StandIn server(always("Score: 5"));
  auto v = judge(with(server, {{"api_key_env", "GRPO_LLM_JUDGE_TEST_KEY", true}}));
  ask(*v, "x");
  ASSERT_EQ(server.count(), 1u);
  EXPECT_EQ(server.received()[0].authorization, "Bearer sk-test-123");
  ::unsetenv("GRPO_LLM_JUDGE_TEST_KEY");
}

// ------------------------------------------------------------------------------ failures

TEST(LlmJudgeFailures, AnswerWithoutAScoreThrowsWithTheAnswer) {
  StandIn server(always("I cannot decide on this one."));
  auto v = judge(with(server));
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_TRUE(has(msg, "llm_judge: no score in the judge's answer")) << msg;
  EXPECT_TRUE(has(msg, "I cannot decide on this one.")) << msg;
  EXPECT_TRUE(has(msg, "pattern ")) << msg;
  EXPECT_TRUE(has(msg, server.url() + "/v1/chat/completions")) << msg;
  // Failures are not cached: the same request asks again.
  EXPECT_FALSE(thrown([&] { ask(*v, "x"); }).empty());
  EXPECT_EQ(server.count(), 2u);
}

TEST(LlmJudgeFailures, AnswerCutAtMaxTokensSaysSo) {
  StandIn server([](int, const httplib::Request&, httplib::Response& res) {
    send(res, chat_answer("Let me think step by step about", "length"));
  });
  auto v = judge(with(server, {{"max_tokens", "8"}}));
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_TRUE(has(msg, "max_tokens = 8")) << msg;
}

TEST(LlmJudgeFailures, MissingFieldsAreNamed) {
  StandIn server([](int n, const httplib::Request&, httplib::Response& res) {
    if (n == 0) send(res, json{{"choices", json::array()}});
    else if (n == 1)
      send(res, json{{"choices", json::array({{{"message", {{"role", "assistant"}, {"content", nullptr}}}}})}});
    else send(res, json{{"choices", json::array({{{"message", {{"content", "Score: 1"}}}}})}});
  });
  auto v = judge(with(server));
  std::string msg = thrown([&] { ask(*v, "a"); });
  EXPECT_TRUE(has(msg, "has no choices[0].message.content")) << msg;
  msg = thrown([&] { ask(*v, "b"); });
  EXPECT_TRUE(has(msg, "choices[0].message.content")) << msg;
  EXPECT_TRUE(has(msg, "null")) << msg;
  auto completions = judge(with(server, {{"endpoint", "completions"}}));
  msg = thrown([&] { ask(*completions, "c"); });  // a chat answer where text is expected
  EXPECT_TRUE(has(msg, "has no choices[0].text")) << msg;
}

TEST(LlmJudgeFailures, AnswerThatIsNotJson) {
  StandIn server([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content("<html>proxy error</html>", "text/html");
  });
  auto v = judge(with(server));
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_TRUE(has(msg, "llm_judge: the judge's answer is not JSON")) << msg;
  EXPECT_TRUE(has(msg, "proxy error")) << msg;
  EXPECT_TRUE(has(msg, server.url())) << msg;
  EXPECT_EQ(server.count(), 1u);
}

TEST(LlmJudgeFailures, SilentServerTimesOutWithinTheBound) {
  StandIn* self = nullptr;
  StandIn server([&self](int, const httplib::Request&, httplib::Response& res) {
    self->wait_or_released(std::chrono::milliseconds(20000));
    send(res, chat_answer("Score: 9"));
  });
  self = &server;
  const double timeout_s = 0.5, backoff_s = 0.1;
  const int retries = 1;
  auto v = judge(with(server, {{"timeout_s", "0.5"}, {"max_retries", "1"}, {"retry_backoff_s", "0.1"}}));
  const auto start = Clock::now();
  const std::string msg = thrown([&] { ask(*v, "x"); });
  const double took = seconds_since(start);
  EXPECT_TRUE(has(msg, "time-out or read error")) << msg;
  EXPECT_TRUE(has(msg, "timeout_s = 0.5 s, 2 attempts")) << msg;
  EXPECT_TRUE(has(msg, server.url() + "/v1/chat/completions")) << msg;
  // Bounded: time-out x attempts + backoff, plus generous slack for a loaded machine.
  EXPECT_LT(took, timeout_s * (retries + 1) + backoff_s + 5.0);
  EXPECT_GE(took, timeout_s);
  EXPECT_EQ(server.count(), 2u);  // the time-out was retried once
}

TEST(LlmJudgeFailures, ServerDownFailsQuicklyNamingTheUrl) {
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto v = judge({{"url", url, true}, {"model", "m", true}, {"retry_backoff_s", "0.05"}});
  const auto start = Clock::now();
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_TRUE(has(msg, "cannot connect to the judge server")) << msg;
  EXPECT_TRUE(has(msg, url + "/v1/chat/completions")) << msg;
}

TEST(LlmJudgeFailures, ServerErrorIsRetried) {
  StandIn server([](int n, const httplib::Request&, httplib::Response& res) {
    if (n == 0) send(res, json{{"error", {{"message", "the engine is overloaded"}}}}, 500);
    else send(res, chat_answer("Score: 5"));
  });
  auto v = judge(with(server, {{"retry_backoff_s", "0.05"}}));
  const VerifierResult r = ask(*v, "x");
  EXPECT_EQ(r.score, 0.5);
  EXPECT_EQ(server.count(), 2u);
  EXPECT_EQ(server.body(0), server.body(1));
}

TEST(LlmJudgeFailures, PersistentServerErrorSaysWhatTheServerSaid) {
  StandIn server([](int, const httplib::Request&, httplib::Response& res) {
    send(res, json{{"error", {{"message", "the engine is overloaded"}}}}, 503);
  });
  auto v = judge(with(server, {{"retry_backoff_s", "0.05"}, {"max_retries", "2"}}));
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_TRUE(has(msg, "llm_judge: the judge server answered HTTP 503: the engine is overloaded")) << msg;
  EXPECT_TRUE(has(msg, "after 2 retries")) << msg;
  EXPECT_TRUE(has(msg, server.url())) << msg;
  EXPECT_EQ(server.count(), 3u);
}

TEST(LlmJudgeFailures, ClientErrorIsNotRetried) {
  StandIn server([](int, const httplib::Request&, httplib::Response& res) {
    send(res, json{{"error", {{"message", "The model `judge-model` does not exist."}}}}, 400);
  });
  auto v = judge(with(server, {{"max_retries", "3"}, {"retry_backoff_s", "0.05"}}));
  const std::string msg = thrown([&] { ask(*v, "x"); });
  EXPECT_TRUE(has(msg, "HTTP 400: The model `judge-model` does not exist. (not retried)")) << msg;
  EXPECT_EQ(server.count(), 1u);
}

// ------------------------------------------------------------------------------ cache

TEST(LlmJudgeCache, IdenticalRequestsAskOnce) {
  StandIn server(always("Score: 7"));
  auto v = judge(with(server));
  const VerifierResult first = ask(*v, "same");
  const VerifierResult second = ask(*v, "same");
  EXPECT_EQ(server.count(), 1u);
  EXPECT_EQ(details(first)["cached"], false);
  EXPECT_EQ(details(second)["cached"], true);
  EXPECT_EQ(first.score, second.score);
  EXPECT_EQ(details(second)["judge_output"], "Score: 7");
  // Any difference in the request is another request: the completion, the ground truth.
  ask(*v, "other");
  ask(*v, "same", "\"43\"");
  EXPECT_EQ(server.count(), 3u);
}

TEST(LlmJudgeCache, ConcurrentIdenticalCallsShareOneRequest) {
  StandIn* self = nullptr;
  StandIn server([&self](int, const httplib::Request&, httplib::Response& res) {
    self->wait_or_released(std::chrono::milliseconds(300));  // all callers arrive meanwhile
    send(res, chat_answer("Score: 7"));
  });
  self = &server;
  auto v = judge(with(server));
  constexpr int kThreads = 8;
  std::vector<VerifierResult> results(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { errors[i] = thrown([&] { results[i] = ask(*v, "same answer"); }); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(server.count(), 1u);
  int asked = 0;
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[i], "");
    EXPECT_NEAR(results[i].score, 0.7, 1e-12);
    if (details(results[i])["cached"] == false) ++asked;
  }
  EXPECT_EQ(asked, 1);
}

TEST(LlmJudgeCache, ConcurrentCallersShareAFailureButDoNotCacheIt) {
  StandIn* self = nullptr;
  StandIn server([&self](int n, const httplib::Request&, httplib::Response& res) {
    self->wait_or_released(std::chrono::milliseconds(200));
    send(res, chat_answer(n == 0 ? "no idea" : "Score: 4"));
  });
  self = &server;
  auto v = judge(with(server));
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { errors[i] = thrown([&] { ask(*v, "same"); }); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(server.count(), 1u);
  for (const auto& e : errors) EXPECT_TRUE(has(e, "no score")) << e;
  EXPECT_NEAR(ask(*v, "same").score, 0.4, 1e-12);  // asked again
  EXPECT_EQ(server.count(), 2u);
}

TEST(LlmJudgeCache, CacheOffAsksEveryTime) {
  StandIn server(always("Score: 7"));
  auto v = judge(with(server, {{"cache", "false"}}));
  const VerifierResult a = ask(*v, "same");
  const VerifierResult b = ask(*v, "same");
  EXPECT_EQ(server.count(), 2u);
  EXPECT_EQ(details(a)["cached"], false);
  EXPECT_EQ(details(b)["cached"], false);
}

TEST(LlmJudgeCache, EvictsTheLeastRecentlyUsed) {
  StandIn server(always("Score: 7"));
  auto v = judge(with(server, {{"cache_size", "2"}}));
  ask(*v, "A");  // 1
  ask(*v, "B");  // 2
  EXPECT_EQ(details(ask(*v, "A"))["cached"], true);
  ask(*v, "C");  // 3, evicts B (A was used more recently)
  EXPECT_EQ(details(ask(*v, "A"))["cached"], true);
  EXPECT_EQ(server.count(), 3u);
  EXPECT_EQ(details(ask(*v, "B"))["cached"], false);  // 4
  EXPECT_EQ(server.count(), 4u);
}

TEST(LlmJudgeCache, InFlightRequestsAreBoundedByConcurrentCalls) {
  StandIn* self = nullptr;
  StandIn server([&self](int, const httplib::Request&, httplib::Response& res) {
    self->wait_or_released(std::chrono::milliseconds(150));
    send(res, chat_answer("Score: 1"));
  });
  self = &server;
  auto v = judge(with(server, {{"concurrent_calls", "2"}}));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      if (thrown([&] { ask(*v, "distinct " + std::to_string(i)); }).empty()) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(server.count(), 6u);
  EXPECT_LE(server.max_in_flight(), 2);
  EXPECT_GE(server.max_in_flight(), 1);
}

// ------------------------------------------------------------------------------ options

TEST(LlmJudgeOptions, BadOptionsAreConfigurationErrorsNamingTheKey) {
  const std::string url = "http://127.0.0.1:9";  // never contacted: construction fails first
  auto err = [&](std::vector<Option> extra, bool with_url = true) {
    std::vector<Option> opts;
    if (with_url) opts = {{"url", url, true}, {"model", "m", true}};
    opts.insert(opts.end(), extra.begin(), extra.end());
    return config_error([&] { make("llm_judge", opts); });
  };
  std::string msg = err({{"model", "m", true}}, false);
  EXPECT_TRUE(has(msg, "verifiers[0].url: required option is missing")) << msg;
  msg = config_error([&] { make("llm_judge", {{"url", url, true}}); });
  EXPECT_TRUE(has(msg, "verifiers[0].model")) << msg;
  msg = config_error([&] { make("llm_judge", {{"url", "localhost:8000", true}, {"model", "m", true}}); });
  EXPECT_TRUE(has(msg, "verifiers[0].url")) << msg;

  msg = err({{"rubric", "{completion}", true}, {"rubric_file", "/tmp/x.txt", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].rubric_file")) << msg;
  EXPECT_TRUE(has(msg, "not both")) << msg;
  msg = err({{"rubric", "Rate {completion} against {answer}", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].rubric")) << msg;
  EXPECT_TRUE(has(msg, "unknown placeholder {answer}")) << msg;
  msg = err({{"rubric", "JSON like {\"score\": 1} for {completion}", true}});
  EXPECT_TRUE(has(msg, "unknown placeholder")) << msg;
  msg = err({{"rubric", "{completion} }", true}});
  EXPECT_TRUE(has(msg, "single '}'")) << msg;
  msg = err({{"rubric", "{completion} {prompt", true}});
  EXPECT_TRUE(has(msg, "not closed")) << msg;
  msg = err({{"rubric", "Rate {prompt}", true}});
  EXPECT_TRUE(has(msg, "no {completion} placeholder")) << msg;
  msg = err({{"rubric_file", "/nonexistent/rubric.txt", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].rubric_file: cannot read '/nonexistent/rubric.txt'")) << msg;
  msg = err({{"rubric_file", std::filesystem::temp_directory_path().string(), true}});
  EXPECT_TRUE(has(msg, "verifiers[0].rubric_file: cannot read")) << msg;

  msg = err({{"score_pattern", R"(Score: \d+)", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].score_pattern")) << msg;
  EXPECT_TRUE(has(msg, "exactly one capture group")) << msg;
  EXPECT_TRUE(has(msg, "has 0")) << msg;
  msg = err({{"score_pattern", R"((Score): (\d+))", true}});
  EXPECT_TRUE(has(msg, "has 2")) << msg;
  msg = err({{"score_pattern", "(unclosed", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].score_pattern: not a valid")) << msg;

  msg = err({{"min_score", "5"}, {"max_score", "5"}});
  EXPECT_TRUE(has(msg, "verifiers[0].max_score: must be greater than min_score")) << msg;
  msg = err({{"max_score", "-1"}});
  EXPECT_TRUE(has(msg, "verifiers[0].max_score")) << msg;

  ::unsetenv("GRPO_LLM_JUDGE_UNSET_KEY");
  msg = err({{"api_key_env", "GRPO_LLM_JUDGE_UNSET_KEY", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].api_key_env")) << msg;
  EXPECT_TRUE(has(msg, "GRPO_LLM_JUDGE_UNSET_KEY is not set")) << msg;

  msg = err({{"endpoint", "responses", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].endpoint: expected one of chat, completions")) << msg;
  msg = err({{"endpoint", "completions", true}, {"system", "be strict", true}});
  EXPECT_TRUE(has(msg, "verifiers[0].system")) << msg;
  msg = err({{"timeout_s", "0"}});
  EXPECT_TRUE(has(msg, "verifiers[0].timeout_s")) << msg;
  msg = err({{"max_retries", "-1"}});
  EXPECT_TRUE(has(msg, "verifiers[0].max_retries")) << msg;
  msg = err({{"temperature", "-0.5"}});
  EXPECT_TRUE(has(msg, "verifiers[0].temperature")) << msg;
  msg = err({{"max_tokens", "0"}});
  EXPECT_TRUE(has(msg, "verifiers[0].max_tokens")) << msg;
  msg = err({{"cache_size", "0"}});
  EXPECT_TRUE(has(msg, "verifiers[0].cache_size")) << msg;
  msg = err({{"concurrent_calls", "0"}});
  EXPECT_TRUE(has(msg, "verifiers[0].concurrent_calls")) << msg;
  msg = err({{"cache", "sometimes"}});
  EXPECT_TRUE(has(msg, "verifiers[0].cache")) << msg;
  msg = err({{"rubrik", "{completion}", true}});  // a typo is rejected, never ignored
  EXPECT_TRUE(has(msg, "rubrik")) << msg;
}

TEST(LlmJudgeOptions, ConstructionDoesNotContactTheServer) {
  StandIn server(always("Score: 1"));
  auto v = judge(with(server));
  EXPECT_EQ(server.count(), 0u);
}

}  // namespace
