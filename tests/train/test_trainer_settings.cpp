// trainer_settings / training_job_settings: keys read once, checked across keys, errors naming
// the key and where it was set ("--set #N" for an override).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/train/trainer_settings.h"
#include "tests/support/error_of.h"

namespace {

using namespace grpo::core;

grpo::sdk::ConfigValue config_with(std::vector<std::string> overrides) {
  return load_config(ConfigSources{{}, std::move(overrides)});
}

std::string settings_error(std::vector<std::string> overrides) {
  const grpo::sdk::ConfigValue config = config_with(std::move(overrides));
  return grpo::testing::error_of([&] { trainer_settings(config); });
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(TrainerSettings, ReadsKeysIntoTheUpdateAndSampling) {
  const TrainerSettings s = trainer_settings(config_with(
      {"rollout.temperature=0.7", "rollout.top_p=0.9", "rollout.top_k=20", "rollout.max_new_tokens=32",
       "rollout.max_prompt_tokens=16", "rollout.stop_strings=[\"\\n\\n\"]", "train.pack_length=48",
       "train.old_logprobs=rollout", "train.max_grad_norm=0.5", "algorithm.loss_aggregation=seq-mean-token-sum",
       "checkpoint.keep_last=0", "run.output_dir=somewhere"}));
  EXPECT_EQ(s.run_dir, "somewhere");
  EXPECT_EQ(s.keep_last, 0);
  // The update's copies of rollout and optimizer keys.
  EXPECT_EQ(s.update.temperature, 0.7);
  EXPECT_EQ(s.update.max_response_len, 32);
  EXPECT_EQ(s.update.pack_length, 48);
  EXPECT_EQ(s.update.old_logprobs, OldLogprobSource::kRollout);
  EXPECT_EQ(s.update.max_grad_norm, 0.5);
  EXPECT_EQ(s.optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(s.update.aggregation, LossAggregation::kSeqMeanTokenSum);
  const grpo::sdk::SamplingParams p = training_sampling(s);
  EXPECT_EQ(p.temperature, 0.7);
  EXPECT_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.min_p, 0.0);
  EXPECT_EQ(p.max_new_tokens, 32);
  EXPECT_EQ(p.stop_strings, std::vector<std::string>{"\n\n"});
}

TEST(TrainerSettings, PackLengthMustHoldPromptPlusResponse) {
  const std::string msg = settings_error({"rollout.max_prompt_tokens=10", "rollout.max_new_tokens=6", "train.pack_length=15"});
  EXPECT_TRUE(contains(msg, "--set #3: train.pack_length: 15 cannot hold one sequence of rollout.max_prompt_tokens + "
                            "rollout.max_new_tokens = 10 + 6 = 16 tokens"))
      << msg;
  // Exactly one sequence fits.
  EXPECT_EQ(trainer_settings(config_with({"rollout.max_prompt_tokens=10", "rollout.max_new_tokens=6", "train.pack_length=16"}))
                .update.pack_length,
            16);
}

TEST(TrainerSettings, MiniBatchesHoldWholeGroups) {
  const std::string msg = settings_error({"rollout.num_unique_prompts=4", "train.num_mini_batches=5"});
  EXPECT_TRUE(contains(msg, "--set #2: train.num_mini_batches: mini-batches hold whole groups: at most "
                            "rollout.num_unique_prompts = 4, got 5"))
      << msg;
}

TEST(TrainerSettings, ActiveSamplingNeedsZeroStdFiltering) {
  const std::string msg = settings_error({"algorithm.active_sampling=true", "algorithm.filter_zero_std_groups=false"});
  EXPECT_TRUE(contains(msg, "--set #1: algorithm.active_sampling: active sampling refills zero-std groups")) << msg;
}

TEST(TrainerSettings, PassAtKNeedsEnoughSamples) {
  const std::string msg = settings_error({"eval.pass_k=3", "eval.num_samples=2"});
  EXPECT_TRUE(contains(msg, "--set #1: eval.pass_k: pass@3 needs eval.num_samples >= 3, got 2")) << msg;
}

TEST(TrainerSettings, TrainingRolloutsAreNotGreedy) {
  const std::string msg = settings_error({"rollout.temperature=0"});
  EXPECT_TRUE(contains(msg, "--set #1: rollout.temperature: training rollouts need temperature > 0")) << msg;
}

TEST(TrainerSettings, RangesNameTheKey) {
  EXPECT_TRUE(contains(settings_error({"train.ref_update_alpha=0"}), "train.ref_update_alpha: expected a number in (0, 1]"));
  EXPECT_TRUE(contains(settings_error({"eval.temperature=-1"}), "eval.temperature: expected a finite number >= 0"));
  EXPECT_TRUE(contains(settings_error({"rollout.top_p=0"}), "rollout.top_p"));
  EXPECT_TRUE(contains(settings_error({"rollout.async_steps=-1"}), "rollout.async_steps"));
}

TEST(TrainerSettings, JobSettingsReadEverySection) {
  const TrainingJobSettings job = training_job_settings(config_with(
      {"data.train=[t.jsonl]", "data.shuffle=false", "reward.timeout_s=2.5", "rollout.max_new_tokens=64", "train.steps=7"}));
  EXPECT_EQ(job.trainer.steps, 7);
  ASSERT_EQ(job.data.train.size(), 1u);
  EXPECT_EQ(job.data.train[0].path, "t.jsonl");
  EXPECT_FALSE(job.data.shuffle);
  EXPECT_EQ(job.rewards.timeout_s, 2.5);
  EXPECT_EQ(job.rewards.max_new_tokens, 64);  // the reward's copy of rollout.max_new_tokens
  // The trainer's keys are checked first: the first bad key is the one reported.
  const grpo::sdk::ConfigValue bad = config_with({"reward.timeout_s=0", "train.pack_length=1"});
  const std::string msg = grpo::testing::error_of([&] { training_job_settings(bad); });
  EXPECT_TRUE(contains(msg, "train.pack_length")) << msg;
}

}  // namespace
