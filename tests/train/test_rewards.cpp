// Reward scoring (VerifierPool: routing, weights, format gate/additive, failures, timeouts,
// concurrency), shaping (overlong, non-stop penalty, masking), zero-std filtering, active
// sampling, pass@k and the reward metrics, on hand-built groups with hand-computed values.
// Verifiers are the real exact_match and format plugins, loaded the way a run loads them; the
// few test-local verifiers only misbehave on purpose (bad score, sleeping past the timeout).
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/config/config_loader.h"
#include "core/train/rewards.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"

namespace {

using grpo::core::ActiveSamplingBatch;
using grpo::core::Example;
using grpo::core::Group;
using grpo::core::RewardOptions;
using grpo::core::Sample;
using grpo::core::ScoringStats;
using grpo::core::VerificationTarget;
using grpo::core::VerifierPool;
using grpo::core::VerifierSlot;
using grpo::sdk::Verifier;
using grpo::sdk::VerifierInput;
using grpo::sdk::VerifierResult;

// ------------------------------------------------------------------------------ helpers

std::shared_ptr<Verifier> exact_match(const std::vector<grpo::testing::PluginOption>& opts = {}) {
  return grpo::testing::create_component<Verifier>("exact_match", opts, "verifiers[0]");
}
std::shared_ptr<Verifier> format_verifier() {
  return grpo::testing::create_component<Verifier>("format", {}, "verifiers[1]");
}

VerifierSlot slot(std::string name, std::shared_ptr<Verifier> v, double weight = 1.0) {
  VerifierSlot s;
  s.name = std::move(name);
  s.key_path = "verifiers[?]";
  s.weight = weight;
  s.verifier = std::move(v);
  return s;
}

Sample sample(std::string text, bool finished = true, std::size_t response_tokens = 4) {
  Sample s;
  s.text = std::move(text);
  s.finished = finished;
  s.response_ids.assign(response_tokens, 7);
  return s;
}

Group group(std::vector<VerificationTarget> targets, std::vector<Sample> samples, std::size_t line = 1) {
  Group g;
  g.example.source = "train.jsonl";
  g.example.line = line;
  g.example.text = "What is 6 * 7?";
  g.example.targets = std::move(targets);
  g.samples = std::move(samples);
  return g;
}

std::vector<std::string> prompts_for(const std::vector<Group>& groups) {
  std::vector<std::string> out;
  for (const Group& g : groups) out.push_back("<prompt>" + g.example.text);
  return out;
}

ScoringStats score(std::vector<Group>& groups, const std::vector<VerifierSlot>& verifiers, const RewardOptions& options,
                   std::size_t threads = 2, double timeout_s = 10.0) {
  VerifierPool pool(threads, timeout_s);
  return pool.score(groups, prompts_for(groups), verifiers, options);
}


bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

// A completion both exact_match flavours can judge: "full" compares the whole text, "tags"
// (extract: answer_tag) the last <answer>...</answer>; format wants `...</think> <answer>...</answer>`.
const char* kR1Answer42 = "<think>6*7</think> <answer>42</answer>";

// ------------------------------------------------------------------------------ routing

// Slots: 0 "exact_match" (whole completion, weight 1), 1 "tags/answer_match" (answer tag,
// weight 2). verification_reward 10.
std::vector<VerifierSlot> two_matchers() {
  return {slot("exact_match", exact_match(), 1.0),
          slot("tags/answer_match", exact_match({{"extract", "answer_tag", true}}), 2.0)};
}

TEST(RewardScoring, EmptyLabelRunsEveryVerifierAndSumsWeightedScores) {
  std::vector<Group> groups = {group({{"", "\"42\""}}, {sample(kR1Answer42), sample("42"), sample("41")})};
  RewardOptions opt;  // verification_reward 10
  ScoringStats stats = score(groups, two_matchers(), opt);
  EXPECT_EQ(stats.calls, 6u);  // 3 samples x 2 verifiers
  EXPECT_EQ(stats.failures, 0u);
  const auto& s = groups[0].samples;
  // R1 answer: full text != "42" -> 0; tag "42" -> 1.  0*1*10 + 1*2*10 = 20; mean raw 0.5 -> correct.
  ASSERT_EQ(s[0].verdicts.size(), 2u);
  EXPECT_EQ(s[0].verdicts[0].verifier, "exact_match");
  EXPECT_EQ(s[0].verdicts[0].score, 0.0);
  EXPECT_EQ(s[0].verdicts[1].verifier, "tags/answer_match");
  EXPECT_EQ(s[0].verdicts[1].score, 1.0);
  EXPECT_EQ(s[0].verdicts[1].weight, 2.0);
  EXPECT_DOUBLE_EQ(s[0].verifier_reward, 20.0);
  EXPECT_TRUE(s[0].correct);
  // "42": full 1, no tag 0 -> 1*1*10 = 10; mean raw 0.5 -> correct.
  EXPECT_DOUBLE_EQ(s[1].verifier_reward, 10.0);
  EXPECT_TRUE(s[1].correct);
  // "41": 0 and 0.
  EXPECT_DOUBLE_EQ(s[2].verifier_reward, 0.0);
  EXPECT_FALSE(s[2].correct);
}

TEST(RewardScoring, LabelSelectsByNameOrComponentPart) {
  std::vector<Group> groups = {
      group({{"exact_match", "\"42\""}}, {sample("42")}, 1),                // slot 0 only: 1*1*10 = 10
      group({{"answer_match", "\"42\""}}, {sample(kR1Answer42)}, 2),        // part after '/': slot 1: 1*2*10 = 20
      group({{"tags/answer_match", "\"42\""}}, {sample(kR1Answer42)}, 3),   // whole name: slot 1: 20
      // Two targets, each with its own ground truth: slot 0 vs "42" (full text "<answer>7</answer>": 0),
      // slot 1 vs "7" (tag: 1) -> 0 + 1*2*10 = 20; mean raw (0 + 1) / 2 = 0.5 -> correct.
      group({{"exact_match", "\"42\""}, {"answer_match", "\"7\""}}, {sample("<answer>7</answer>")}, 4),
  };
  RewardOptions opt;
  opt.verification_reward = 10.0;
  score(groups, two_matchers(), opt);
  ASSERT_EQ(groups[0].samples[0].verdicts.size(), 1u);
  EXPECT_EQ(groups[0].samples[0].verdicts[0].verifier, "exact_match");
  EXPECT_DOUBLE_EQ(groups[0].samples[0].verifier_reward, 10.0);
  for (int g : {1, 2}) {
    ASSERT_EQ(groups[g].samples[0].verdicts.size(), 1u) << g;
    EXPECT_EQ(groups[g].samples[0].verdicts[0].verifier, "tags/answer_match");
    EXPECT_DOUBLE_EQ(groups[g].samples[0].verifier_reward, 20.0);
  }
  const Sample& multi = groups[3].samples[0];
  ASSERT_EQ(multi.verdicts.size(), 2u);
  EXPECT_EQ(multi.verdicts[0].score, 0.0);
  EXPECT_EQ(multi.verdicts[1].score, 1.0);
  EXPECT_DOUBLE_EQ(multi.verifier_reward, 20.0);
  EXPECT_TRUE(multi.correct);
}

TEST(RewardScoring, VerificationRewardScalesTheSum) {
  std::vector<Group> groups = {group({{"", "\"42\""}}, {sample(kR1Answer42)})};
  RewardOptions opt;
  opt.verification_reward = 2.5;
  score(groups, two_matchers(), opt);
  EXPECT_DOUBLE_EQ(groups[0].samples[0].verifier_reward, 5.0);  // 0*1*2.5 + 1*2*2.5
}

// The verifier sees the rendered prompt, the completion, the target's ground truth and label,
// the row's metadata and the finished flag (exact_match echoes nothing of these, so a local
// verifier reports them).
class EchoInput : public Verifier {
 public:
  VerifierResult verify(const VerifierInput& in) const override {
    return {1.0, std::string(in.prompt) + "|" + std::string(in.completion) + "|" + std::string(in.ground_truth) + "|" +
                     std::string(in.dataset) + "|" + std::string(in.metadata) + "|" + (in.finished ? "stop" : "cut")};
  }
};

TEST(RewardScoring, VerifierInputCarriesPromptTargetMetadataAndFinished) {
  std::vector<Group> groups = {group({{"echo", "[1, 2]"}}, {sample("abc", false)})};
  groups[0].example.metadata = R"({"level": 3})";
  VerifierPool pool(1, 10.0);
  pool.score(groups, {"rendered prompt"}, {slot("echo", std::make_shared<EchoInput>())}, RewardOptions{});
  ASSERT_EQ(groups[0].samples[0].verdicts.size(), 1u);
  EXPECT_EQ(groups[0].samples[0].verdicts[0].details, R"(rendered prompt|abc|[1, 2]|echo|{"level": 3}|cut)");
  EXPECT_THROW(pool.score(groups, {}, {slot("echo", std::make_shared<EchoInput>())}, RewardOptions{}),
               std::invalid_argument);
}

// ------------------------------------------------------------------------------ label checks

std::vector<Example> rows(std::vector<std::string> labels) {
  std::vector<Example> out;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    Example ex;
    ex.source = "data/train.jsonl";
    ex.line = i + 1;
    ex.targets = {{labels[i], "\"42\""}};
    out.push_back(std::move(ex));
  }
  return out;
}

TEST(RewardLabels, KnownLabelsPass) {
  RewardOptions opt;
  EXPECT_NO_THROW(grpo::core::check_verifier_labels(rows({"", "exact_match", "answer_match", "tags/answer_match"}),
                                                     two_matchers(), opt));
}

TEST(RewardLabels, UnknownLabelNamesRowLabelAndConfiguredVerifiers) {
  RewardOptions opt;
  const std::string msg = grpo::testing::error_of<std::exception>(
      [&] { grpo::core::check_verifier_labels(rows({"exact_match", "gsm8k", "gsm8k", "math"}), two_matchers(), opt); });
  EXPECT_TRUE(contains(msg, "data/train.jsonl:2: verifier label \"gsm8k\" selects no configured verifier")) << msg;
  EXPECT_TRUE(contains(msg, "verifier name not registered")) << msg;
  EXPECT_TRUE(contains(msg, "configured verifiers: exact_match, tags/answer_match")) << msg;
  EXPECT_TRUE(contains(msg, "3 rows have unmatched labels")) << msg;
  EXPECT_TRUE(contains(msg, "\"math\" (1 row, first data/train.jsonl:4)")) << msg;
  EXPECT_THROW(grpo::core::check_verifier_labels(rows({"gsm8k"}), two_matchers(), opt), std::invalid_argument);
}

TEST(RewardLabels, FormatVerifierMustExistAndIsNotSelectedByLabels) {
  std::vector<VerifierSlot> verifiers = {slot("exact_match", exact_match()), slot("format", format_verifier())};
  RewardOptions opt;
  opt.format_verifier = "formatt";
  std::string msg = grpo::testing::error_of<std::exception>([&] { grpo::core::check_verifier_labels(rows({""}), verifiers, opt); });
  EXPECT_TRUE(contains(msg, "reward.format_verifier \"formatt\" names no configured verifier")) << msg;
  EXPECT_TRUE(contains(msg, "did you mean 'format'")) << msg;

  opt.format_verifier = "format";
  EXPECT_NO_THROW(grpo::core::check_verifier_labels(rows({"", "exact_match"}), verifiers, opt));
  msg = grpo::testing::error_of<std::exception>([&] { grpo::core::check_verifier_labels(rows({"format"}), verifiers, opt); });
  EXPECT_TRUE(contains(msg, "data/train.jsonl:1: verifier label \"format\" selects no configured verifier")) << msg;

  // Only the format verifier, or nothing at all: nothing scores the answers.
  msg = grpo::testing::error_of<std::exception>([&] { grpo::core::check_verifier_labels(rows({""}), {verifiers[1]}, opt); });
  EXPECT_TRUE(contains(msg, "the only configured verifier, \"format\", is reward.format_verifier")) << msg;
  msg = grpo::testing::error_of<std::exception>([&] { grpo::core::check_verifier_labels(rows({""}), {}, RewardOptions{}); });
  EXPECT_TRUE(contains(msg, "no verifiers are configured")) << msg;
}

// ------------------------------------------------------------------------------ format

// exact_match on the answer tag (weight 1) + format (weight 0.5), verification_reward 10.
//   text                                  answer  format
//   "<think>6*7</think> <answer>42</answer>"   1      1
//   "42"                                   0      0
//   "<answer>42</answer>"                  1      0   (no </think>)
//   "<think>6*7</think> <answer>41</answer>"   0      1
std::vector<Group> format_cases() {
  return {group({{"", "\"42\""}},
                {sample(kR1Answer42), sample("42"), sample("<answer>42</answer>"),
                 sample("<think>6*7</think> <answer>41</answer>")})};
}
std::vector<VerifierSlot> answer_and_format() {
  return {slot("exact_match", exact_match({{"extract", "answer_tag", true}}), 1.0), slot("format", format_verifier(), 0.5)};
}

TEST(RewardFormat, GateKeepsTheRewardOnlyWhenTheFormatMatches) {
  std::vector<Group> groups = format_cases();
  RewardOptions opt;
  opt.format_verifier = "format";
  ScoringStats stats = score(groups, answer_and_format(), opt);
  EXPECT_EQ(stats.calls, 8u);  // 4 samples x (1 labelled + 1 format)
  const auto& s = groups[0].samples;
  ASSERT_EQ(s[0].verdicts.size(), 2u);
  EXPECT_EQ(s[0].verdicts[1].verifier, "format");  // the format verdict comes last
  EXPECT_EQ(s[0].verdicts[1].score, 1.0);
  EXPECT_DOUBLE_EQ(s[0].verifier_reward, 10.0);  // 1*1*10, format passed
  EXPECT_TRUE(s[0].correct);
  EXPECT_DOUBLE_EQ(s[1].verifier_reward, 0.0);
  EXPECT_FALSE(s[1].correct);
  EXPECT_DOUBLE_EQ(s[2].verifier_reward, 0.0);  // right answer, gated by the format
  EXPECT_FALSE(s[2].correct);
  EXPECT_DOUBLE_EQ(s[3].verifier_reward, 0.0);  // format alone earns nothing in gate mode
  EXPECT_FALSE(s[3].correct);
}

TEST(RewardFormat, AdditiveAddsTheWeightedFormatScore) {
  std::vector<Group> groups = format_cases();
  RewardOptions opt;
  opt.format_verifier = "format";
  opt.format_additive = true;
  score(groups, answer_and_format(), opt);
  const auto& s = groups[0].samples;
  EXPECT_DOUBLE_EQ(s[0].verifier_reward, 15.0);  // 1*1*10 + 1*0.5*10
  EXPECT_TRUE(s[0].correct);
  EXPECT_DOUBLE_EQ(s[1].verifier_reward, 0.0);
  EXPECT_FALSE(s[1].correct);
  EXPECT_DOUBLE_EQ(s[2].verifier_reward, 10.0);  // answer only; correctness ignores the format
  EXPECT_TRUE(s[2].correct);
  EXPECT_DOUBLE_EQ(s[3].verifier_reward, 5.0);   // format only: 1*0.5*10
  EXPECT_FALSE(s[3].correct);
}

TEST(RewardFormat, WithoutFormatVerifierTheFormatEntryIsAnOrdinaryVerifier) {
  std::vector<Group> groups = format_cases();
  score(groups, answer_and_format(), RewardOptions{});
  // Label "" selects both: the third sample scores 1*1*10 + 0*0.5*10 = 10, mean raw 0.5 -> correct.
  EXPECT_DOUBLE_EQ(groups[0].samples[2].verifier_reward, 10.0);
  EXPECT_TRUE(groups[0].samples[2].correct);
  EXPECT_DOUBLE_EQ(groups[0].samples[0].verifier_reward, 15.0);
}

// ------------------------------------------------------------------------------ failures

TEST(RewardPool, ThrowingCallScoresZeroAndOthersAreScored) {
  // exact_match throws std::invalid_argument on a ground truth that is not JSON (unquoted Paris).
  std::vector<Group> groups = {group({{"", "Paris"}}, {sample("Paris"), sample("Lyon")}, 1),
                               group({{"", "\"42\""}}, {sample("42"), sample("41")}, 2)};
  ScoringStats stats = score(groups, {slot("exact_match", exact_match())}, RewardOptions{});
  EXPECT_EQ(stats.calls, 4u);
  EXPECT_EQ(stats.failures, 2u);
  EXPECT_EQ(stats.timeouts, 0u);
  for (const Sample& s : groups[0].samples) {
    ASSERT_EQ(s.verdicts.size(), 1u);
    EXPECT_TRUE(s.verdicts[0].failed);
    EXPECT_FALSE(s.verdicts[0].timed_out);
    EXPECT_EQ(s.verdicts[0].score, 0.0);
    EXPECT_FALSE(s.verdicts[0].details.empty());  // the exception's message
    EXPECT_DOUBLE_EQ(s.verifier_reward, 0.0);
  }
  EXPECT_DOUBLE_EQ(groups[1].samples[0].verifier_reward, 10.0);
  EXPECT_FALSE(groups[1].samples[0].verdicts[0].failed);
  EXPECT_DOUBLE_EQ(groups[1].samples[1].verifier_reward, 0.0);
}

// Returns the completion parsed as a number: lets a test hand the pool an out-of-range score.
class ScoreIsTheText : public Verifier {
 public:
  VerifierResult verify(const VerifierInput& in) const override { return {std::stod(std::string(in.completion)), ""}; }
};

TEST(RewardPool, ScoreOutsideZeroOneIsAFailure) {
  std::vector<Group> groups = {group({{"", "0"}}, {sample("0.25"), sample("1.5"), sample("nan"), sample("x")})};
  ScoringStats stats = score(groups, {slot("raw", std::make_shared<ScoreIsTheText>())}, RewardOptions{});
  const auto& s = groups[0].samples;
  EXPECT_DOUBLE_EQ(s[0].verifier_reward, 2.5);  // 0.25 * 10
  EXPECT_FALSE(s[0].verdicts[0].failed);
  EXPECT_TRUE(s[1].verdicts[0].failed);
  EXPECT_TRUE(contains(s[1].verdicts[0].details, "outside [0, 1]")) << s[1].verdicts[0].details;
  EXPECT_TRUE(s[2].verdicts[0].failed);
  EXPECT_TRUE(s[3].verdicts[0].failed);  // std::stod threw
  for (int i : {1, 2, 3}) EXPECT_EQ(s[i].verdicts[0].score, 0.0);
  EXPECT_EQ(stats.failures, 3u);
}

// Sleeps on completion "slow" until released (or 5 s), then answers 1; otherwise defers to a
// real exact_match. `returned` counts the slow calls that came back (late, after the timeout).
class SleepsOnSlow : public Verifier {
 public:
  SleepsOnSlow(std::shared_ptr<Verifier> inner, std::shared_ptr<std::atomic<bool>> release,
               std::shared_ptr<std::atomic<int>> returned)
      : inner_(std::move(inner)), release_(std::move(release)), returned_(std::move(returned)) {}
  VerifierResult verify(const VerifierInput& in) const override {
    if (in.completion != "slow") return inner_->verify(in);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!release_->load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    returned_->fetch_add(1);
    return {1.0, "late"};
  }

 private:
  std::shared_ptr<Verifier> inner_;
  std::shared_ptr<std::atomic<bool>> release_;
  std::shared_ptr<std::atomic<int>> returned_;
};

TEST(RewardPool, CallPastTimeoutScoresZeroAndThePoolKeepsWorking) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto returned = std::make_shared<std::atomic<int>>(0);
  std::vector<VerifierSlot> verifiers = {slot("exact_match", std::make_shared<SleepsOnSlow>(exact_match(), release, returned))};
  {
    // One worker: the calls queued behind the stuck one run on its replacement.
    VerifierPool pool(1, 0.2);
    std::vector<Group> groups = {group({{"", "\"42\""}}, {sample("slow"), sample("42"), sample("41"), sample("42")})};
    ScoringStats stats = pool.score(groups, prompts_for(groups), verifiers, RewardOptions{});
    EXPECT_EQ(stats.calls, 4u);
    EXPECT_EQ(stats.timeouts, 1u);
    EXPECT_EQ(stats.failures, 0u);
    const auto& s = groups[0].samples;
    EXPECT_TRUE(s[0].verdicts[0].timed_out);
    EXPECT_TRUE(s[0].verdicts[0].failed);
    EXPECT_EQ(s[0].verdicts[0].score, 0.0);
    EXPECT_TRUE(contains(s[0].verdicts[0].details, "timed out")) << s[0].verdicts[0].details;
    EXPECT_DOUBLE_EQ(s[0].verifier_reward, 0.0);
    EXPECT_DOUBLE_EQ(s[1].verifier_reward, 10.0);
    EXPECT_DOUBLE_EQ(s[2].verifier_reward, 0.0);
    EXPECT_DOUBLE_EQ(s[3].verifier_reward, 10.0);
    EXPECT_EQ(pool.abandoned_workers(), 1u);
    EXPECT_EQ(returned->load(), 0);  // still stuck

    // The pool still scores (on the replacement worker).
    std::vector<Group> more = {group({{"", "\"42\""}}, {sample("42")})};
    EXPECT_EQ(pool.score(more, prompts_for(more), verifiers, RewardOptions{}).timeouts, 0u);
    EXPECT_DOUBLE_EQ(more[0].samples[0].verifier_reward, 10.0);
  }  // the destructor does not wait for the stuck call; the samples are gone too
  release->store(true);
  // The late answer lands in the call's own state, not in the (destroyed) samples or pool.
  for (int i = 0; i < 1000 && returned->load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(returned->load(), 1);
}

TEST(RewardPool, ConcurrentScoresEqualSequentialCalls) {
  auto verifier = exact_match({{"ignore_punctuation", "true"}});
  const std::vector<std::string> texts = {"42", "42.", "The answer: 42", "41", " 42 ", "forty-two", "4 2", "42!"};
  const std::vector<std::string> truths = {"\"42\"", "42", "[\"41\", 42]"};
  std::vector<Group> groups;
  for (std::size_t g = 0; g < 30; ++g) {
    std::vector<Sample> samples;
    for (std::size_t i = 0; i < 8; ++i) samples.push_back(sample(texts[(g + i) % texts.size()]));
    groups.push_back(group({{"", truths[g % truths.size()]}}, std::move(samples), g + 1));
  }
  VerifierPool pool(4, 30.0);
  ScoringStats stats = pool.score(groups, prompts_for(groups), {slot("exact_match", verifier)}, RewardOptions{});
  EXPECT_EQ(stats.calls, 240u);
  std::size_t ones = 0;
  for (const Group& g : groups)
    for (const Sample& s : g.samples) {
      VerifierInput in;
      const std::string prompt = "<prompt>" + g.example.text;
      in.prompt = prompt;
      in.completion = s.text;
      in.ground_truth = g.example.targets[0].ground_truth;
      in.dataset = "";
      in.metadata = g.example.metadata;
      const VerifierResult expected = verifier->verify(in);
      ASSERT_EQ(s.verdicts.size(), 1u);
      EXPECT_EQ(s.verdicts[0].score, expected.score) << s.text;
      EXPECT_EQ(s.verdicts[0].details, expected.details);
      ones += expected.score == 1.0 ? 1 : 0;
    }
  EXPECT_GT(ones, 0u);  // both outcomes occur
  EXPECT_LT(ones, 240u);
}

// ------------------------------------------------------------------------------ shaping

Sample scored(double verifier_reward, std::size_t len, bool finished = true) {
  Sample s = sample("", finished, len);
  s.verifier_reward = verifier_reward;
  return s;
}

TEST(RewardShaping, RewardIsTheVerifierRewardByDefault) {
  std::vector<Group> groups = {group({}, {scored(10, 300), scored(0, 1, false)})};
  grpo::core::shape_rewards(groups, RewardOptions{});
  EXPECT_DOUBLE_EQ(groups[0].samples[0].reward, 10.0);
  EXPECT_DOUBLE_EQ(groups[0].samples[1].reward, 0.0);
  EXPECT_TRUE(groups[0].samples[1].trainable);
}

TEST(RewardShaping, OverlongPenaltyBelowInsideAndAtTheLimit) {
  RewardOptions opt;
  opt.max_new_tokens = 20;
  opt.overlong_buffer = 8;  // expected = 20 - 8 = 12
  opt.overlong_penalty_factor = 1.0;
  std::vector<Group> groups = {group({}, {scored(10, 10), scored(10, 12), scored(10, 16), scored(10, 20)})};
  grpo::core::shape_rewards(groups, opt);
  const auto& s = groups[0].samples;
  EXPECT_DOUBLE_EQ(s[0].reward, 10.0);  // exceed -2: min(2/8, 0) = 0
  EXPECT_DOUBLE_EQ(s[1].reward, 10.0);  // exceed 0
  EXPECT_DOUBLE_EQ(s[2].reward, 9.5);   // exceed 4: -4/8 * 1
  EXPECT_DOUBLE_EQ(s[3].reward, 9.0);   // exceed 8: -8/8 * 1, the full factor at the limit

  opt.overlong_penalty_factor = 2.0;
  grpo::core::shape_rewards(groups, opt);
  EXPECT_DOUBLE_EQ(s[2].reward, 9.0);  // -4/8 * 2
  EXPECT_DOUBLE_EQ(s[3].reward, 8.0);  // -8/8 * 2
}

TEST(RewardShaping, NonStopPenaltyReplacesTheRewardAfterOverlongShaping) {
  RewardOptions opt;
  opt.non_stop_penalty = true;
  opt.non_stop_penalty_value = -1.0;
  opt.max_new_tokens = 20;
  opt.overlong_buffer = 8;
  std::vector<Group> groups = {group({}, {scored(10, 20, false), scored(10, 16, true), scored(0, 20, false)})};
  grpo::core::shape_rewards(groups, opt);
  const auto& s = groups[0].samples;
  EXPECT_DOUBLE_EQ(s[0].reward, -1.0);  // replaced, not -1 on top of the overlong -1
  EXPECT_DOUBLE_EQ(s[1].reward, 9.5);   // finished: overlong only
  EXPECT_DOUBLE_EQ(s[2].reward, -1.0);
  EXPECT_TRUE(s[0].trainable);          // masking is a separate option
}

TEST(RewardShaping, MaskTruncatedCompletionsClearsTrainable) {
  RewardOptions opt;
  opt.mask_truncated_completions = true;
  std::vector<Group> groups = {group({}, {scored(10, 5, true), scored(10, 20, false)})};
  grpo::core::shape_rewards(groups, opt);
  EXPECT_TRUE(groups[0].samples[0].trainable);
  EXPECT_FALSE(groups[0].samples[1].trainable);
  EXPECT_DOUBLE_EQ(groups[0].samples[1].reward, 10.0);  // the reward still counts in the group statistics
  opt.mask_truncated_completions = false;
  grpo::core::shape_rewards(groups, opt);
  EXPECT_TRUE(groups[0].samples[1].trainable);
}

// ------------------------------------------------------------------------------ zero-std groups

Group rewarded(std::vector<double> rewards, std::size_t line) {
  std::vector<Sample> samples;
  for (double r : rewards) {
    Sample s;
    s.reward = r;
    samples.push_back(s);
  }
  return group({}, std::move(samples), line);
}

std::vector<std::size_t> lines(const std::vector<Group>& groups) {
  std::vector<std::size_t> out;
  for (const Group& g : groups) out.push_back(g.example.line);
  return out;
}

TEST(RewardFilter, DropsGroupsWithEqualRewardsKeepingOrder) {
  std::vector<Group> groups = {rewarded({1, 0}, 1), rewarded({1, 1, 1}, 2), rewarded({0.5}, 3),
                               rewarded({0, 0, 1e-9}, 4), rewarded({-1, -1}, 5), rewarded({0, 10, 0}, 6)};
  const grpo::core::GroupFilter f = grpo::core::filter_zero_std_groups(groups);
  EXPECT_EQ(f.kept, 3u);
  EXPECT_EQ(f.dropped, 3u);  // all-equal, the group of one, all-equal negative
  EXPECT_EQ(lines(groups), (std::vector<std::size_t>{1, 4, 6}));
}

TEST(RewardActiveSampling, FillsAcrossBatchesAndCountsWhatItDrops) {
  ActiveSamplingBatch batch(3);
  batch.add({rewarded({1, 0}, 1), rewarded({0, 0}, 2), rewarded({0, 1}, 3)});
  EXPECT_FALSE(batch.full());
  EXPECT_EQ(batch.size(), 2u);
  batch.add({rewarded({1, 1}, 4), rewarded({5}, 5)});  // nothing with spread
  EXPECT_FALSE(batch.full());
  batch.add({rewarded({0, 2}, 6), rewarded({3, 0}, 7)});
  EXPECT_TRUE(batch.full());
  EXPECT_EQ(batch.batches_added(), 3u);
  EXPECT_EQ(batch.zero_std_dropped(), 3u);  // lines 2, 4, 5
  const std::vector<Group> taken = batch.take();
  EXPECT_EQ(lines(taken), (std::vector<std::size_t>{1, 3, 6}));
  EXPECT_EQ(batch.surplus_dropped(), 1u);  // line 7
  EXPECT_TRUE(batch.take().empty());
}

TEST(RewardActiveSampling, TakeBeforeFullReturnsWhatItHas) {
  ActiveSamplingBatch batch(5);
  batch.add({rewarded({1, 0}, 1), rewarded({2, 2}, 2), rewarded({0, 1}, 3)});
  EXPECT_FALSE(batch.full());
  EXPECT_EQ(lines(batch.take()), (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(batch.surplus_dropped(), 0u);
  EXPECT_EQ(batch.zero_std_dropped(), 1u);
  EXPECT_THROW(ActiveSamplingBatch(0), std::invalid_argument);
}

// ------------------------------------------------------------------------------ pass@k

TEST(RewardPassAtK, MatchesHandValues) {
  using grpo::core::pass_at_k;
  EXPECT_NEAR(pass_at_k(5, 2, 1), 0.4, 1e-12);  // c / n
  EXPECT_NEAR(pass_at_k(5, 2, 2), 0.7, 1e-12);  // 1 - C(3,2)/C(5,2) = 1 - 3/10
  EXPECT_EQ(pass_at_k(5, 0, 3), 0.0);
  EXPECT_EQ(pass_at_k(5, 4, 2), 1.0);           // n - c = 1 < k
  EXPECT_EQ(pass_at_k(5, 5, 5), 1.0);
  // Binomials far past 2^64: 1 - C(190, 100) / C(200, 100) = 0.99922897393728... (exact
  // rational arithmetic, Python: 1 - Fraction(comb(190, 100), comb(200, 100))).
  EXPECT_NEAR(pass_at_k(200, 10, 100), 0.9992289739372822, 1e-12);
  EXPECT_THROW(pass_at_k(5, 2, 6), std::invalid_argument);
  EXPECT_THROW(pass_at_k(5, 2, 0), std::invalid_argument);
  EXPECT_THROW(pass_at_k(5, 6, 1), std::invalid_argument);
}

// ------------------------------------------------------------------------------ metrics

double metric(const std::vector<std::pair<std::string, double>>& metrics, const std::string& name) {
  for (const auto& [n, v] : metrics)
    if (n == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

TEST(RewardMetrics, SummariseEverySample) {
  auto verdict = [](const char* name, double score, bool failed = false, bool timed_out = false) {
    grpo::core::VerifierVerdict v;
    v.verifier = name;
    v.score = score;
    v.failed = failed;
    v.timed_out = timed_out;
    return v;
  };
  //      reward  verifier_reward  correct  finished  len  trainable  verdicts (exact_match, format)
  //   a    10       10              yes      yes        4   yes        1, 1
  //   b     0        0              no       no        10   no         0 (timed out), 1
  //   c     5        5              no       yes        2   yes        0.25 (failed), 0
  Sample a = sample("", true, 4);
  a.reward = 10, a.verifier_reward = 10, a.correct = true;
  a.verdicts = {verdict("exact_match", 1.0), verdict("format", 1.0)};
  Sample b = sample("", false, 10);
  b.reward = 0, b.verifier_reward = 0, b.trainable = false;
  b.verdicts = {verdict("exact_match", 0.0, true, true), verdict("format", 1.0)};
  Sample c = sample("", true, 2);
  c.reward = 5, c.verifier_reward = 5;
  c.verdicts = {verdict("exact_match", 0.25, true), verdict("format", 0.0)};
  std::vector<Group> groups = {group({}, {a, b}), group({}, {c})};
  const auto m = grpo::core::reward_metrics(groups);
  EXPECT_DOUBLE_EQ(metric(m, "objective/scores"), 5.0);                        // (10 + 0 + 5) / 3
  EXPECT_NEAR(metric(m, "objective/scores_std"), std::sqrt(50.0 / 3.0), 1e-12);  // (25 + 25 + 0) / 3
  EXPECT_DOUBLE_EQ(metric(m, "objective/verifiable_correct_rate"), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(metric(m, "objective/verifier_reward"), 5.0);
  EXPECT_DOUBLE_EQ(metric(m, "reward/exact_match/score"), 1.25 / 3.0);   // (1 + 0 + 0.25) / 3
  EXPECT_DOUBLE_EQ(metric(m, "reward/exact_match/correct_rate"), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(metric(m, "reward/format/score"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(metric(m, "reward/format/correct_rate"), 2.0 / 3.0);
  EXPECT_EQ(metric(m, "reward/verifier_errors"), 1.0);    // c's exact_match (b's is a timeout)
  EXPECT_EQ(metric(m, "reward/verifier_timeouts"), 1.0);
  EXPECT_DOUBLE_EQ(metric(m, "val/stop_token_rate"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(metric(m, "val/sequence_lengths"), 16.0 / 3.0);
  EXPECT_EQ(metric(m, "val/sequence_lengths_min"), 2.0);
  EXPECT_EQ(metric(m, "val/sequence_lengths_max"), 10.0);
  EXPECT_EQ(metric(m, "val/num_truncated_masked"), 1.0);
  EXPECT_TRUE(grpo::core::reward_metrics({}).empty());
}

// ------------------------------------------------------------------------------ options

RewardOptions options_from(std::vector<std::string> overrides) {
  return grpo::core::reward_options(grpo::core::load_config(grpo::core::ConfigSources{{}, std::move(overrides)}));
}

TEST(RewardOptionsConfig, ReadsDefaultsAndKeys) {
  const RewardOptions d = options_from({});
  EXPECT_EQ(d.verification_reward, 10.0);
  EXPECT_EQ(d.format_verifier, "");
  EXPECT_FALSE(d.format_additive);
  EXPECT_EQ(d.overlong_buffer, 0);
  EXPECT_EQ(d.max_new_tokens, 256);
  EXPECT_EQ(d.timeout_s, 30.0);
  EXPECT_EQ(d.num_threads, 0u);

  const RewardOptions o = options_from({"reward.format_mode=additive", "reward.overlong_buffer=64",
                                        "rollout.max_new_tokens=512", "reward.non_stop_penalty=true",
                                        "reward.non_stop_penalty_value=-2", "reward.num_threads=3", "reward.timeout_s=0.5",
                                        "reward.mask_truncated_completions=true", "reward.format_verifier=format"});
  EXPECT_TRUE(o.format_additive);
  EXPECT_EQ(o.overlong_buffer, 64);
  EXPECT_EQ(o.max_new_tokens, 512);
  EXPECT_TRUE(o.non_stop_penalty);
  EXPECT_EQ(o.non_stop_penalty_value, -2.0);
  EXPECT_EQ(o.num_threads, 3u);
  EXPECT_EQ(o.timeout_s, 0.5);
  EXPECT_TRUE(o.mask_truncated_completions);
  EXPECT_EQ(o.format_verifier, "format");
}

TEST(RewardOptionsConfig, OutOfRangeValuesNameTheKey) {
  auto error = [](std::vector<std::string> overrides) { return grpo::testing::error_of<std::exception>([&] { options_from(overrides); }); };
  std::string msg = error({"reward.overlong_buffer=256"});  // == max_new_tokens (256)
  EXPECT_TRUE(contains(msg, "--set #1")) << msg;
  EXPECT_TRUE(contains(msg, "reward.overlong_buffer: expected an integer in [0, rollout.max_new_tokens) = [0, 256)")) << msg;
  msg = error({"reward.overlong_buffer=-1"});
  EXPECT_TRUE(contains(msg, "reward.overlong_buffer")) << msg;
  msg = error({"reward.timeout_s=0"});
  EXPECT_TRUE(contains(msg, "reward.timeout_s: expected a finite number of seconds > 0")) << msg;
  msg = error({"reward.num_threads=-2"});
  EXPECT_TRUE(contains(msg, "reward.num_threads: expected an integer >= 0")) << msg;
  msg = error({"reward.verification_reward=.inf"});
  EXPECT_TRUE(contains(msg, "reward.verification_reward: expected a finite number")) << msg;
  msg = error({"reward.overlong_penalty_factor=-1"});
  EXPECT_TRUE(contains(msg, "reward.overlong_penalty_factor")) << msg;
}

}  // namespace
