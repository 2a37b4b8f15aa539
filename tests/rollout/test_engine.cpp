// The native engine against naive full-recompute generation and the trainer's log-probs,
// continuous batching, stop conditions and bad requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/algo/mismatch_correction.h"
#include "core/model/logprobs.h"
#include "tests/rollout/rollout_fixtures.h"

using namespace grpo;
using grpo::native::Engine;
using grpo::native::EngineOptions;
using grpo::testing::make_engine;
using grpo::testing::mixed_prompts;
using grpo::testing::naive_greedy;

namespace {

sdk::GenerationRequest request(const std::string& id, std::vector<std::int64_t> prompt, std::int64_t max_new_tokens,
                               double temperature = 0.0, std::int64_t n = 1, std::uint64_t seed = 0) {
  sdk::GenerationRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.n = n;
  r.seed = seed;
  r.sampling.temperature = temperature;
  r.sampling.max_new_tokens = max_new_tokens;
  return r;
}

struct GreedyCase {
  std::string model;
  int batch;
  std::int64_t max_num_seqs;
};

std::string greedy_case_name(const ::testing::TestParamInfo<GreedyCase>& info) {
  return info.param.model + "_batch" + std::to_string(info.param.batch) + "_slots" + std::to_string(info.param.max_num_seqs);
}

class GreedyParity : public ::testing::TestWithParam<GreedyCase> {};

}  // namespace

// Token for token equal to recomputing the whole sequence at every step, with prompts of
// mixed lengths; with fewer slots than sequences, samples wait and take freed slots.
TEST_P(GreedyParity, EqualsNaiveFullRecompute) {
  const GreedyCase& c = GetParam();
  EngineOptions options;
  options.max_num_seqs = c.max_num_seqs;
  options.max_num_batched_tokens = 64;  // several prefill forwards
  Engine engine = make_engine(c.model, options);
  const auto& config = engine.model()->config();
  const auto prompts = mixed_prompts(c.batch, 2, 37, config.vocab_size, 11 + c.batch);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < c.batch; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 12 + (i % 5) * 3));
  const auto results = engine.generate(requests);
  ASSERT_EQ(results.size(), requests.size());
  int stopped = 0;
  for (int i = 0; i < c.batch; ++i) {
    ASSERT_TRUE(results[i].status.is_ok()) << results[i].status.message();
    ASSERT_EQ(results[i].request_id, requests[i].id);
    ASSERT_EQ(results[i].samples.size(), 1u);
    const auto& s = results[i].samples[0];
    const auto expected = naive_greedy(engine.model(), prompts[i], requests[i].sampling.max_new_tokens, config.eos_token_ids);
    EXPECT_EQ(s.token_ids, expected) << "prompt " << i << " of length " << prompts[i].size();
    const bool ended_on_eos = !expected.empty() &&
                              std::count(config.eos_token_ids.begin(), config.eos_token_ids.end(), expected.back()) > 0;
    stopped += ended_on_eos;
    EXPECT_EQ(s.finish_reason, ended_on_eos ? sdk::FinishReason::kStop : sdk::FinishReason::kLength);
    EXPECT_EQ(s.logprobs.size(), s.token_ids.size());
  }
  const auto& stats = engine.last_stats();
  EXPECT_EQ(stats.finished_stop, stopped);
  EXPECT_EQ(stats.finished_stop + stats.finished_length, c.batch);
  EXPECT_LE(stats.decode_tokens, stats.decode_steps * c.max_num_seqs);
}

INSTANTIATE_TEST_SUITE_P(Rollout, GreedyParity,
                         ::testing::Values(GreedyCase{"qwen3", 1, 32}, GreedyCase{"qwen3", 7, 32}, GreedyCase{"qwen3", 32, 32},
                                           GreedyCase{"qwen3", 32, 5}, GreedyCase{"qwen2", 7, 3}, GreedyCase{"qwen2", 32, 32},
                                           GreedyCase{"llama", 7, 32}, GreedyCase{"llama", 32, 8}),
                         greedy_case_name);
