// Multi-turn generation in the native engine (generate with a TurnController, the
// RolloutBackend::generate_turns of ABI 1.2): a parked sample keeps its KV cache, and resuming
// it after appended tokens gives exactly what recomputing the whole sequence gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "core/model/logprobs.h"
#include "tests/plugins/backends/native/rollout_fixtures.h"

using namespace grpo;
using grpo::native::DecodeSteps;
using grpo::native::Engine;
using grpo::native::EngineOptions;
using grpo::testing::make_engine;
using grpo::testing::mixed_prompts;
using grpo::testing::request;

namespace {

// Greedy decoding of `prompt` by full recomputation, stopping after a stop id (kept) or
// `limit` tokens: the reference for one turn.
std::vector<std::int64_t> recompute_turn(core::CausalLM& model, const std::vector<std::int64_t>& prompt, std::int64_t limit,
                                         const std::vector<std::int64_t>& stop_ids) {
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = prompt, out;
  for (std::int64_t i = 0; i < limit; ++i) {
    const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
    const auto logits = model->forward(ids, core::AttentionLayout::padded(torch::ones_like(ids)));
    const std::int64_t next = logits[0][-1].argmax().item<std::int64_t>();
    out.push_back(next);
    seq.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return out;
}

// A controller that plays a fixed script: after turn k it appends appends[k] and allows
// limits[k] more sampled tokens; after the last scripted turn the sample finishes.
// `late`: continuations are handed out only when the engine waits (a slow tool), so parked
// samples stay parked while the others decode.
struct ScriptedController final : sdk::TurnController {
  std::vector<std::vector<std::int64_t>> appends;
  std::vector<std::int64_t> limits;
  bool late = false;
  std::vector<sdk::TurnContinuation> queue;
  std::map<std::pair<std::size_t, std::int64_t>, std::vector<std::vector<std::int64_t>>> turns;
  int polls_without_answer = 0;

  void turn_ended(const sdk::TurnEnd& end) override {
    turns[{end.request, end.sample}].push_back(end.output->token_ids);
    EXPECT_EQ(end.output->logprobs.size(), end.output->token_ids.size());
    sdk::TurnContinuation c;
    c.request = end.request;
    c.sample = end.sample;
    if (static_cast<std::size_t>(end.turn) < appends.size()) {
      c.finish = false;
      c.append_ids = appends[static_cast<std::size_t>(end.turn)];
      c.max_new_tokens = limits[static_cast<std::size_t>(end.turn)];
    }
    queue.push_back(std::move(c));
  }
  std::vector<sdk::TurnContinuation> continuations(bool wait) override {
    if (late && !wait) {
      if (!queue.empty()) ++polls_without_answer;
      return {};
    }
    return std::exchange(queue, {});
  }
};

struct TurnCase {
  std::string model;
  int batch;
  std::int64_t max_num_seqs;
  bool late;
  DecodeSteps steps = DecodeSteps::kAuto;  // kBucketed: parked samples beside padded decode rows
};

std::string turn_case_name(const ::testing::TestParamInfo<TurnCase>& info) {
  return info.param.model + "_batch" + std::to_string(info.param.batch) + "_slots" +
         std::to_string(info.param.max_num_seqs) + (info.param.late ? "_late" : "_prompt") + (info.param.steps == DecodeSteps::kBucketed ? "_bucketed" : "");
}

class TurnParity : public ::testing::TestWithParam<TurnCase> {};

}  // namespace

// Three turns per sample: the first ends at a stop token, the second and third at their turn
// limits; between them fixed tokens are appended. Every turn equals greedy decoding of the
// whole sequence so far recomputed from scratch, with mixed prompt lengths, fewer slots than
// samples (parked samples hold slots of their own) and continuations that come late.
TEST_P(TurnParity, ResumedTurnsEqualFullRecompute) {
  const TurnCase& c = GetParam();
  EngineOptions options;
  options.max_num_seqs = c.max_num_seqs;
  options.max_num_batched_tokens = 64;
  options.decode_steps = c.steps;
  Engine engine = make_engine(c.model, options);
  const auto& config = engine.model()->config();
  const auto prompts = mixed_prompts(c.batch, 3, 29, config.vocab_size, 5 + c.batch);

  ScriptedController controller;
  controller.appends = {{5, 6, 7}, {8, 9, 10, 11, 12}};
  controller.limits = {4, 3};
  controller.late = c.late;
  std::vector<sdk::GenerationRequest> requests;
  std::vector<std::vector<std::int64_t>> stop_ids;
  for (int i = 0; i < c.batch; ++i) {
    // The first turn stops at the 3rd token greedy decoding produces (unless EOS comes first).
    const auto first = recompute_turn(engine.model(), prompts[i], 3, config.eos_token_ids);
    std::vector<std::int64_t> stops = config.eos_token_ids;
    stops.push_back(first.back());
    auto r = request("p" + std::to_string(i), prompts[i], 40);
    r.sampling.stop_token_ids = {first.back()};
    requests.push_back(std::move(r));
    stop_ids.push_back(std::move(stops));
  }
  const auto results = engine.generate(requests, &controller);
  ASSERT_EQ(results.size(), requests.size());
  for (int i = 0; i < c.batch; ++i) {
    ASSERT_TRUE(results[i].status.is_ok()) << results[i].status.message();
    ASSERT_EQ(results[i].samples.size(), 1u);
    // The reference: turn by turn, each recomputed over prompt + everything before it.
    std::vector<std::int64_t> seq = prompts[i], expected;
    std::vector<std::vector<std::int64_t>> expected_turns;
    std::int64_t limit = 40;
    for (std::size_t turn = 0;; ++turn) {
      const auto t = recompute_turn(engine.model(), seq, limit, stop_ids[i]);
      expected_turns.push_back(t);
      expected.insert(expected.end(), t.begin(), t.end());
      seq.insert(seq.end(), t.begin(), t.end());
      if (turn >= controller.appends.size()) break;
      const auto& a = controller.appends[turn];
      expected.insert(expected.end(), a.begin(), a.end());
      seq.insert(seq.end(), a.begin(), a.end());
      limit = controller.limits[turn];
    }
    const auto& s = results[i].samples[0];
    EXPECT_EQ(s.token_ids, expected) << "prompt " << i;
    const auto key = std::make_pair(static_cast<std::size_t>(i), std::int64_t{0});
    EXPECT_EQ(controller.turns[key], expected_turns) << "prompt " << i;
    ASSERT_EQ(s.logprobs.size(), s.token_ids.size());
    // Appended tokens were not sampled: log-prob 0.
    const std::size_t t0 = expected_turns[0].size();
    for (std::size_t k = 0; k < controller.appends[0].size(); ++k) EXPECT_EQ(s.logprobs[t0 + k], 0.0f);
    // The last turn's reason: its limit, or a stop token before it.
    const bool ran_to_limit = static_cast<std::int64_t>(expected_turns.back().size()) == controller.limits.back() &&
                              std::count(stop_ids[i].begin(), stop_ids[i].end(), expected_turns.back().back()) == 0;
    EXPECT_EQ(s.finish_reason, ran_to_limit ? sdk::FinishReason::kLength : sdk::FinishReason::kStop);
  }
  const auto& stats = engine.last_stats();
  EXPECT_EQ(stats.turns, 3 * c.batch);
  EXPECT_EQ(stats.appended_tokens, c.batch * 8);
  if (c.late && c.batch > 1) EXPECT_GT(controller.polls_without_answer, 0);
}

INSTANTIATE_TEST_SUITE_P(Rollout, TurnParity,
                         ::testing::Values(TurnCase{"qwen3", 1, 4, false}, TurnCase{"qwen3", 9, 4, false},
                                           TurnCase{"qwen3", 9, 4, true}, TurnCase{"qwen2", 6, 2, true},
                                           TurnCase{"llama", 7, 32, false},
                                           TurnCase{"qwen3", 9, 4, true, DecodeSteps::kBucketed}),
                         turn_case_name);

// The raw log-probs of a resumed turn's tokens are the trainer's teacher-forced log-probs of
// the whole trajectory at those positions (|diff| < 1e-5): the trainer may use them as old
// log-probs.
TEST(RolloutTurns, ResumedLogprobsEqualTeacherForced) {
  Engine engine = make_engine("qwen2");
  const auto prompt = mixed_prompts(1, 9, 9, engine.model()->config().vocab_size, 3)[0];
  ScriptedController controller;
  controller.appends = {{21, 22, 23, 24}};
  controller.limits = {6};
  auto r = request("p", prompt, 20);
  const auto first = recompute_turn(engine.model(), prompt, 4, {});
  r.sampling.stop_token_ids = {first.back()};
  const auto results = engine.generate({r}, &controller);
  ASSERT_TRUE(results[0].status.is_ok());
  const auto& s = results[0].samples[0];
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = prompt;
  seq.insert(seq.end(), s.token_ids.begin(), s.token_ids.end());
  const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
  const auto hidden = engine.model()->hidden_states(ids, core::AttentionLayout::padded(torch::ones_like(ids)));
  const auto P = static_cast<std::int64_t>(prompt.size()), C = static_cast<std::int64_t>(s.token_ids.size());
  const auto lp = core::token_logprobs(hidden.narrow(1, P - 1, C), engine.model()->lm_head_weight(), ids.narrow(1, P, C)).logprobs;
  const std::size_t appended_from = first.size(), appended_to = appended_from + 4;
  for (std::int64_t t = 0; t < C; ++t) {
    if (static_cast<std::size_t>(t) >= appended_from && static_cast<std::size_t>(t) < appended_to) continue;
    EXPECT_NEAR(s.logprobs[static_cast<std::size_t>(t)], lp[0][t].item<float>(), 1e-5) << "token " << t;
  }
}

// A controller that finishes every sample at its first turn end leaves generation as it was
// without one.
TEST(RolloutTurns, FinishingAtOnceEqualsPlainGeneration) {
  Engine engine = make_engine("qwen3");
  const auto prompts = mixed_prompts(5, 4, 20, engine.model()->config().vocab_size, 9);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 9, 1.0, 3, 100 + i));
  ScriptedController controller;  // no script: finish
  const auto plain = engine.generate(requests);
  const auto turned = engine.generate(requests, &controller);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(plain[i].samples[j].token_ids, turned[i].samples[j].token_ids);
      EXPECT_EQ(plain[i].samples[j].finish_reason, turned[i].samples[j].finish_reason);
    }
}

// Two continuations for one turn end is a contract violation, reported as such.
TEST(RolloutTurns, ContinuationForARunningSampleIsALogicError) {
  struct Rogue final : sdk::TurnController {
    void turn_ended(const sdk::TurnEnd&) override {}
    std::vector<sdk::TurnContinuation> continuations(bool) override {
      sdk::TurnContinuation c;  // "finish", twice: the second is for a sample that already finished
      c.request = 0;
      c.sample = 0;
      return {c, c};
    }
  } rogue;
  Engine engine = make_engine("qwen3");
  auto r = request("p", {5, 6, 7}, 30);
  EXPECT_THROW(engine.generate({r}, &rogue), std::logic_error);
}
