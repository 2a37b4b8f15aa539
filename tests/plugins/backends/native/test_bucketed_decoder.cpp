// Fixed-shape decode steps (plugins/backends/native/bucketed_decoder.h), the shapes the CUDA
// graphs replay, run eagerly on the CPU: the buckets, what each decode_steps request becomes,
// and the engine's output against naive full recomputation and against dynamic steps. The
// capture itself is CUDA's: tests/gpu/test_decode_graphs.cpp holds graphs to these steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/plugins/backends/native/rollout_fixtures.h"

using namespace grpo;
using grpo::native::DecodeSteps;
using grpo::native::Engine;
using grpo::native::EngineOptions;
using grpo::testing::make_engine;
using grpo::testing::mixed_prompts;
using grpo::testing::naive_greedy;
using grpo::testing::request;

TEST(DecodeBucket, PowersOfTwoToEightThenMultiplesOfEightCappedAtTheSlots) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected = {
      {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {16, 16}, {17, 24}, {25, 32}, {32, 32}};
  for (const auto& [rows, bucket] : expected) EXPECT_EQ(native::decode_bucket(rows, 32), bucket) << rows << " rows";
  EXPECT_EQ(native::decode_bucket(3, 3), 3);    // never more rows than slots
  EXPECT_EQ(native::decode_bucket(26, 30), 30);
  EXPECT_THROW(native::decode_bucket(0, 32), std::invalid_argument);
  EXPECT_THROW(native::decode_bucket(33, 32), std::invalid_argument);
}

TEST(DecodeSteps, NamesParseAndTheChoiceSaysWhy) {
  for (auto s : {DecodeSteps::kAuto, DecodeSteps::kDynamic, DecodeSteps::kBucketed, DecodeSteps::kGraphs})
    EXPECT_EQ(native::parse_decode_steps(native::decode_steps_name(s)), s);
  EXPECT_FALSE(native::parse_decode_steps("eager").has_value());

  Engine dense = make_engine("qwen3");
  const at::Device cpu(at::kCPU);
  auto choose = [&](DecodeSteps s, Engine& e) { return native::choose_decode_steps(s, *e.model(), cpu); };
  EXPECT_EQ(choose(DecodeSteps::kAuto, dense).steps, DecodeSteps::kDynamic);  // no graphs on a CPU
  EXPECT_EQ(choose(DecodeSteps::kAuto, dense).fallback_reason, "");
  EXPECT_EQ(choose(DecodeSteps::kDynamic, dense).steps, DecodeSteps::kDynamic);
  EXPECT_EQ(choose(DecodeSteps::kBucketed, dense).steps, DecodeSteps::kBucketed);
  EXPECT_EQ(choose(DecodeSteps::kBucketed, dense).fallback_reason, "");
  const auto graphs = choose(DecodeSteps::kGraphs, dense);
  EXPECT_EQ(graphs.steps, DecodeSteps::kBucketed);
  EXPECT_NE(graphs.fallback_reason.find("CUDA"), std::string::npos) << graphs.fallback_reason;

  // Models whose step reads the device from the host keep dynamic steps, and say why.
  Engine moe = make_engine("qwen2_moe");
  const auto moe_choice = choose(DecodeSteps::kBucketed, moe);
  EXPECT_EQ(moe_choice.steps, DecodeSteps::kDynamic);
  EXPECT_NE(moe_choice.fallback_reason.find("mixture-of-experts"), std::string::npos) << moe_choice.fallback_reason;
  Engine dynamic_rope = make_engine("llama_dynamic");
  const auto rope_choice = choose(DecodeSteps::kGraphs, dynamic_rope);
  EXPECT_EQ(rope_choice.steps, DecodeSteps::kDynamic);
  EXPECT_NE(rope_choice.fallback_reason.find("RoPE"), std::string::npos) << rope_choice.fallback_reason;
  EXPECT_EQ(choose(DecodeSteps::kAuto, moe).steps, DecodeSteps::kDynamic);
}

namespace {

class BucketedEngine : public ::testing::TestWithParam<std::string> {};

std::string family_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

// Token for token equal to recomputing the whole sequence at every step. Five slots for seven
// prompts: buckets 1, 2, 4 and 5 with padding rows; completions long enough to leave the
// sliding windows (16) of mistral and the Gemmas.
TEST_P(BucketedEngine, GreedyEqualsNaiveFullRecompute) {
  EngineOptions options;
  options.max_num_seqs = 5;
  options.max_num_batched_tokens = 64;
  options.decode_steps = DecodeSteps::kBucketed;
  Engine engine = make_engine(GetParam(), options);
  const auto& config = engine.model()->config();
  const auto prompts = mixed_prompts(7, 2, 23, config.vocab_size, 29);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < 7; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 6 + i * 3));
  const auto results = engine.generate(requests);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(results[i].status.is_ok()) << results[i].status.message();
    const auto expected = naive_greedy(engine.model(), prompts[i], requests[i].sampling.max_new_tokens, config.eos_token_ids);
    EXPECT_EQ(results[i].samples[0].token_ids, expected) << "prompt " << i;
  }
  const auto& stats = engine.last_stats();
  EXPECT_EQ(stats.decode_mode, DecodeSteps::kBucketed);
  EXPECT_GT(stats.padded_rows, 0);  // 3 live rows run as 4, say
  EXPECT_EQ(stats.graph_replays, 0);
}

// Sampled with seeds, temperature and top-p: the same tokens as dynamic steps, log-probs within
// float32 rounding (the attention sums run over more, masked, keys).
TEST_P(BucketedEngine, SampledOutputEqualsDynamicSteps) {
  auto run = [&](DecodeSteps steps) {
    EngineOptions options;
    options.max_num_seqs = 6;
    options.decode_steps = steps;
    Engine engine = make_engine(GetParam(), options);
    const auto prompts = mixed_prompts(3, 4, 19, engine.model()->config().vocab_size, 41);
    std::vector<sdk::GenerationRequest> requests;
    for (int i = 0; i < 3; ++i) {
      auto r = request("p" + std::to_string(i), prompts[i], 20, 1.0, 3, 100 + i);
      r.sampling.top_p = 0.9;
      requests.push_back(std::move(r));
    }
    auto results = engine.generate(requests);
    EXPECT_EQ(engine.last_stats().decode_mode, steps);
    return results;
  };
  const auto dynamic = run(DecodeSteps::kDynamic), bucketed = run(DecodeSteps::kBucketed);
  for (std::size_t i = 0; i < dynamic.size(); ++i)
    for (std::size_t j = 0; j < dynamic[i].samples.size(); ++j) {
      const auto& a = dynamic[i].samples[j];
      const auto& b = bucketed[i].samples[j];
      ASSERT_EQ(a.token_ids, b.token_ids) << "request " << i << " sample " << j;
      for (std::size_t t = 0; t < a.logprobs.size(); ++t) EXPECT_NEAR(a.logprobs[t], b.logprobs[t], 1e-5);
    }
}

INSTANTIATE_TEST_SUITE_P(Rollout, BucketedEngine,
                         ::testing::Values("qwen3", "qwen2", "llama", "mistral", "gemma2", "gemma3", "olmo2"), family_name);

// A model that cannot take fixed shapes decodes with dynamic steps when bucketed ones are asked
// for, and its output is unchanged.
TEST(BucketedEngineFallback, MixtureOfExpertsKeepsDynamicSteps) {
  EngineOptions options;
  options.max_num_seqs = 4;
  options.decode_steps = DecodeSteps::kBucketed;
  Engine engine = make_engine("qwen2_moe", options);
  const auto& config = engine.model()->config();
  const auto prompts = mixed_prompts(3, 3, 11, config.vocab_size, 7);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 8));
  const auto results = engine.generate(requests);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(results[i].samples[0].token_ids, naive_greedy(engine.model(), prompts[i], 8, config.eos_token_ids));
  EXPECT_EQ(engine.last_stats().decode_mode, DecodeSteps::kDynamic);
  EXPECT_EQ(engine.last_stats().padded_rows, 0);
}
