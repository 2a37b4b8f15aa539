// The rollout stage alone (core/train/rollout_worker.h): shares and seeds, prompt
// tokenization, and the rollout thread with a scripted backend and verifier (no model): the
// policy version of every batch, the weights the backend loads, the request seeds, zero-std
// filtering and the batch metrics.
//
// Expected seeds: splitmix64 as documented in rollout_worker.h, evaluated once in plain
// Python (not the code under test) and pasted as literals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/train/rollout_worker.h"
#include "tests/train/rollout_fakes.h"
#include "tests/train/trainer_fixtures.h"

namespace {

using namespace grpo::core;
using namespace grpo::testing;
namespace sdk = grpo::sdk;

TEST(TrainerRolloutShares, BalancedFirstRanksLarger) {
  // 10 prompts over 3 ranks: 4, 3, 3.
  EXPECT_EQ(share_of(10, 0, 3).begin, 0u);
  EXPECT_EQ(share_of(10, 0, 3).end, 4u);
  EXPECT_EQ(share_of(10, 1, 3).begin, 4u);
  EXPECT_EQ(share_of(10, 1, 3).end, 7u);
  EXPECT_EQ(share_of(10, 2, 3).begin, 7u);
  EXPECT_EQ(share_of(10, 2, 3).end, 10u);
  // Fewer items than ranks: the last rank gets none.
  EXPECT_EQ(share_of(2, 0, 3).size(), 1u);
  EXPECT_EQ(share_of(2, 1, 3).begin, 1u);
  EXPECT_EQ(share_of(2, 2, 3).size(), 0u);
  EXPECT_EQ(share_of(2, 2, 3).begin, 2u);
  // One process holds everything; nothing to split is empty everywhere.
  EXPECT_EQ(share_of(5, 0, 1).begin, 0u);
  EXPECT_EQ(share_of(5, 0, 1).end, 5u);
  EXPECT_EQ(share_of(0, 1, 2).size(), 0u);
}

TEST(TrainerRolloutShares, SharesTileTheRangeInRankOrder) {
  for (std::size_t n = 0; n < 20; ++n)
    for (int world = 1; world <= 5; ++world) {
      std::size_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const Share s = share_of(n, rank, world);
        EXPECT_EQ(s.begin, next) << n << " items, rank " << rank << " of " << world;
        EXPECT_TRUE(s.size() == n / world || s.size() == n / world + 1);
        next = s.end;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(TrainerRolloutSeeds, MixSeedIsStable) {
  EXPECT_EQ(mix_seed({}), 0x9e3779b97f4a7c15ULL);  // no part: the initial state
  EXPECT_EQ(mix_seed({0}), 0x3a13eaf202632586ULL);
  EXPECT_EQ(mix_seed({1, 1, 0, 0}), 0x9fc3ec00cbb3487cULL);  // run.seed 1, step 1, attempt 0, slot 0
  EXPECT_EQ(mix_seed({1, 1, 0, 1}), 0x083aaa55d897f3adULL);
  EXPECT_EQ(mix_seed({1, 0xE7A1, 0}), 0xc8aa32ea53e846ffULL);  // evaluation, run.seed 1, prompt 0
  // Order matters.
  EXPECT_NE(mix_seed({1, 2}), mix_seed({2, 1}));
}

TEST(TrainerRolloutPrompts, LongPromptsAreDroppedAndTheRestTokenized) {
  TrainerSettings s;
  s.max_prompt_tokens = 3;
  s.chat_template = "none";
  const PromptSet p = tokenize_prompts({row("abc", 1), row("abcd", 2), row("xy", 3)}, byte_tokenizer(), s, "training");
  ASSERT_EQ(p.examples.size(), 2u);  // "abcd" is 4 byte tokens
  EXPECT_EQ(p.examples[0].line, 1u);
  EXPECT_EQ(p.examples[1].line, 3u);
  EXPECT_EQ(p.texts, (std::vector<std::string>{"abc", "xy"}));
  ASSERT_EQ(p.ids.size(), 2u);
  EXPECT_EQ(p.ids[0].size(), 3u);
  EXPECT_EQ(p.ids[1].size(), 2u);
  EXPECT_EQ(p.ids[0][0], byte_tokenizer().encode("a").at(0));
}

TEST(TrainerRolloutWorker, VersionsSeedsAndZeroStdFiltering) {
  TrainerSettings s;
  s.seed = 7;
  s.num_prompts = 2;
  s.group_size = 2;
  s.async_steps = 1;
  s.max_prompt_tokens = 8;
  s.chat_template = "none";
  const PromptSet prompts = tokenize_prompts({row("p0", 1), row("p1", 2), row("same", 3)}, byte_tokenizer(), s, "training");
  ScriptedBackend backend;
  const std::vector<VerifierSlot> verifiers{{"yes", "verifiers[0]", 1.0, std::make_shared<YesVerifier>()}};
  RewardOptions rewards;
  rewards.verification_reward = 10.0;
  VerifierPool pool(1, 30.0);
  RolloutContext ctx(s, backend, verifiers, rewards, pool);
  EXPECT_EQ(ctx.prompt_share(), 2u);

  RolloutWorker worker(ctx, prompts, PromptSampler(3, s.seed, /*shuffle=*/false), /*start_step=*/0, /*last_step=*/3);
  worker.publish(0, weights_of_version(0));

  // Step 1: rows 0, 1 with version max(0, 1 - 1 - 1) = 0; both groups have reward spread.
  ReadyBatch b1 = worker.next();
  EXPECT_EQ(b1.step, 1);
  EXPECT_EQ(b1.policy_version, 0);
  ASSERT_EQ(b1.groups.size(), 2u);
  EXPECT_EQ(b1.groups[0].example.line, 1u);
  EXPECT_EQ(b1.groups[1].example.line, 2u);
  ASSERT_EQ(b1.groups[0].samples.size(), 2u);
  EXPECT_EQ(b1.groups[0].samples[0].reward, 10.0);  // "yes": score 1 x weight 1 x verification_reward 10
  EXPECT_EQ(b1.groups[0].samples[1].reward, 0.0);
  EXPECT_TRUE(b1.groups[0].samples[0].correct);
  EXPECT_EQ(b1.position_after.epoch, 0u);
  EXPECT_EQ(b1.position_after.offset, 2u);
  EXPECT_EQ(metric_value(b1.metrics, "other/zero_std_groups_dropped"), 0.0);
  EXPECT_EQ(metric_value(b1.metrics, "other/real_batch_size_ratio"), 1.0);
  EXPECT_EQ(metric_value(b1.metrics, "objective/scores"), 5.0);  // two "yes" of four samples, 10 each
  EXPECT_EQ(metric_value(b1.metrics, "reward/verifier_calls"), 4.0);
  EXPECT_EQ(metric_value(b1.metrics, "rollout/generation_batches"), 1.0);

  // Step 2: rows 2 ("same": zero-std, dropped) and 0 (the next epoch), still version 0.
  ReadyBatch b2 = worker.next();
  EXPECT_EQ(b2.policy_version, 0);
  ASSERT_EQ(b2.groups.size(), 1u);
  EXPECT_EQ(b2.groups[0].example.line, 1u);
  EXPECT_EQ(b2.position_after.epoch, 1u);
  EXPECT_EQ(b2.position_after.offset, 1u);
  EXPECT_EQ(metric_value(b2.metrics, "other/zero_std_groups_dropped"), 1.0);
  EXPECT_EQ(metric_value(b2.metrics, "other/real_batch_size_ratio"), 0.5);

  // Step 3 needs version max(0, 3 - 2) = 1: generated only once it is published.
  worker.publish(1, weights_of_version(1));
  ReadyBatch b3 = worker.next();
  EXPECT_EQ(b3.policy_version, 1);
  ASSERT_FALSE(b3.groups.empty());
  EXPECT_EQ(b3.groups[0].policy_version, 1);

  std::lock_guard<std::mutex> lock(backend.mutex);
  // The backend loads a version once, when it changes.
  EXPECT_EQ(backend.loaded_versions, (std::vector<std::int64_t>{0, 1}));
  // Seeds: mix_seed(run.seed 7, step, attempt 0, slot).
  EXPECT_EQ(backend.seeds, (std::vector<std::uint64_t>{0xaae41f7a26b1ed55ULL, 0x0b8c4b4c52342c02ULL,    // step 1
                                                       0xc2be9c4cb74ccd0eULL, 0x319217692c6b0b69ULL,    // step 2
                                                       0x81aa8a501a34bcc4ULL, 0xf02d754045b681f7ULL}));  // step 3
}

TEST(TrainerRolloutWorker, AFailedRequestIsRethrownByNext) {
  class FailingBackend : public sdk::RolloutBackend {
   public:
    std::vector<sdk::GenerationResult> generate(const std::vector<sdk::GenerationRequest>& requests) override {
      std::vector<sdk::GenerationResult> out(requests.size());
      for (auto& r : out) r.status = sdk::Status::invalid_argument("prompt too long");
      return out;
    }
    void update_weights(const sdk::NamedTensors&) override {}
  } backend;
  TrainerSettings s;
  s.num_prompts = 1;
  s.group_size = 1;
  s.chat_template = "none";
  const PromptSet prompts = tokenize_prompts({row("p0", 4)}, byte_tokenizer(), s, "training");
  const std::vector<VerifierSlot> verifiers{{"yes", "verifiers[0]", 1.0, std::make_shared<YesVerifier>()}};
  VerifierPool pool(1, 30.0);
  RolloutContext ctx(s, backend, verifiers, RewardOptions{}, pool);
  RolloutWorker worker(ctx, prompts, PromptSampler(1, 1, false), 0, 2);
  worker.publish(0, weights_of_version(0));
  try {
    worker.next();
    FAIL() << "expected the generation error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("generation failed for train.jsonl:4: prompt too long"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// What the trainer hands the rollout backend: copies (never the live parameters), on the
// model's device, in the model's dtype or, for bf16-mixed feeding a bf16 engine, in bf16
// (the round-to-nearest bf16 value of each float32 master).
TEST(WeightSnapshot, CopiesInTheModelsDtypeOrTheAskedOne) {
  grpo::core::CausalLM model = grpo::testing::tiny_test_model(2);
  const auto params = model->named_parameters();
  const grpo::sdk::NamedTensors same = weight_snapshot(model);
  const grpo::sdk::NamedTensors bf16 = weight_snapshot(model, torch::kBFloat16);
  ASSERT_EQ(same.size(), params.size());
  ASSERT_EQ(bf16.size(), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& live = params[i].value();
    EXPECT_EQ(same[i].first, params[i].key());
    EXPECT_EQ(same[i].second.scalar_type(), torch::kFloat32);
    EXPECT_NE(same[i].second.data_ptr(), live.data_ptr()) << "a snapshot must not alias the weights the trainer updates";
    EXPECT_TRUE(torch::equal(same[i].second, live));
    EXPECT_EQ(bf16[i].second.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(bf16[i].second.device(), live.device());
    // Round to nearest with 8 significant bits: in [2^e, 2^(e+1)) values are 2^(e-7) apart,
    // so |bf16(w) - w| <= 2^(e-8) <= 2^-8 |w|.
    EXPECT_TRUE((bf16[i].second.to(torch::kFloat32) - live).abs().le(live.abs() * std::ldexp(1.0, -8)).all().item<bool>())
        << params[i].key();
  }
}

}  // namespace

namespace {

using namespace grpo::core;
using namespace grpo::testing;

// A chat row renders through tokenizer.chat_template (a Jinja file here) with
// tokenizer.chat_template_kwargs as template variables.
TEST(TrainerRolloutPrompts, ChatRowsRenderWithTheTemplateFileAndItsVariables) {
  const std::string path = ::testing::TempDir() + "/kwargs-template.jinja";
  std::ofstream(path) << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                         "{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}";
  Example chat = row("", 1);
  chat.messages = {{"system", "S", ""}, {"user", "2+2?", ""}};
  TrainerSettings s;
  s.max_prompt_tokens = 100;
  s.chat_template = path;
  PromptSet p = tokenize_prompts({chat}, byte_tokenizer(), s, "training");
  ASSERT_EQ(p.texts.size(), 1u);
  EXPECT_EQ(p.texts[0], "[system] S\n[user] 2+2?\n");
  s.chat_template_kwargs = R"({"enable_thinking": false})";
  p = tokenize_prompts({chat}, byte_tokenizer(), s, "training");
  EXPECT_EQ(p.texts[0], "[system] S\n[user] 2+2?\n/no_think");
}

}  // namespace
