// The defaults of every settings struct equal the schema's (core/config/schema.cpp).
//
// A default lives in two places: the schema table (what a configuration holds when a key is not
// set) and the struct's member initializer (what code that builds a struct by hand gets; the
// readers' fallbacks are the member initializers too). This test reads the built-in default
// configuration (load_config with no file and no --set: the schema fills every key) with the
// project's own readers and compares each field with a default-constructed struct, so a
// default changed in one place only fails here, naming the key.
//
// Fields without a schema key, or whose default is intentionally different, are listed with
// the reason next to their check.
#include <gtest/gtest.h>

#include <string>

#include "core/algo/algorithm_settings.h"
#include "core/config/config_loader.h"
#include "core/data/dataset.h"
#include "core/dist/process_group.h"
#include "core/optim/optimizer.h"
#include "core/train/policy_update.h"
#include "core/train/reward_model.h"
#include "core/train/rewards.h"
#include "core/train/sft.h"
#include "core/train/trainer_settings.h"

namespace {

using namespace grpo::core;

// Field `f` of `read` (from the default configuration) equals that of `def` (default-constructed).
#define EXPECT_DEFAULT(read, def, f, key) EXPECT_EQ((read).f, (def).f) << key << " (" #f "): the schema default differs from the member initializer"

const grpo::sdk::ConfigValue& default_configuration() {
  static const grpo::sdk::ConfigValue config = load_config(ConfigSources{});
  return config;
}

void expect_optimizer_defaults(const OptimizerSettings& read, const char* where) {
  SCOPED_TRACE(where);
  const OptimizerSettings def;
  EXPECT_DEFAULT(read, def, learning_rate, "train.learning_rate");
  EXPECT_DEFAULT(read, def, schedule, "train.lr_schedule");
  EXPECT_DEFAULT(read, def, warmup_steps, "train.warmup_steps");
  EXPECT_DEFAULT(read, def, min_lr_ratio, "train.min_lr_ratio");
  EXPECT_DEFAULT(read, def, weight_decay, "train.weight_decay");
  EXPECT_DEFAULT(read, def, beta1, "train.adam_beta1");
  EXPECT_DEFAULT(read, def, beta2, "train.adam_beta2");
  EXPECT_DEFAULT(read, def, eps, "train.adam_eps");
  EXPECT_DEFAULT(read, def, max_grad_norm, "train.max_grad_norm");
}

void expect_kl_and_mismatch_defaults(const KlSettings& kl, const MismatchCorrectionOptions& mismatch, const char* where) {
  SCOPED_TRACE(where);
  const KlSettings kl_def;
  EXPECT_DEFAULT(kl, kl_def, kl_coef, "algorithm.kl_coef");
  EXPECT_DEFAULT(kl, kl_def, kl_in_reward, "algorithm.kl_in_reward");
  const MismatchCorrectionOptions m_def;
  EXPECT_DEFAULT(mismatch, m_def, mode, "algorithm.mismatch_correction.mode");
  EXPECT_DEFAULT(mismatch, m_def, max, "algorithm.mismatch_correction.max");
  EXPECT_DEFAULT(mismatch, m_def, min, "algorithm.mismatch_correction.min");
  EXPECT_DEFAULT(mismatch, m_def, sequence_reduction, "algorithm.mismatch_correction.sequence_reduction");
  EXPECT_DEFAULT(mismatch, m_def, log_ratio_clamp, "algorithm.mismatch_correction.log_ratio_clamp");
}

// data.* keys; require_ground_truth / require_completion have no key (the job sets them).
void expect_data_defaults(const DataOptions& read, const DataOptions& def) {
  EXPECT_TRUE(read.train.empty()) << "data.train";
  EXPECT_TRUE(def.train.empty());
  EXPECT_TRUE(read.eval.empty()) << "data.eval";
  EXPECT_TRUE(def.eval.empty());
  EXPECT_DEFAULT(read, def, format, "data.format");
  EXPECT_DEFAULT(read, def, prompt_column, "data.prompt_column");
  EXPECT_DEFAULT(read, def, ground_truth_column, "data.ground_truth_column");
  EXPECT_DEFAULT(read, def, dataset_column, "data.dataset_column");
  EXPECT_DEFAULT(read, def, completion_column, "data.completion_column");
  EXPECT_DEFAULT(read, def, skip_bad_rows, "data.skip_bad_rows");
  EXPECT_DEFAULT(read, def, shuffle, "data.shuffle");
}

TEST(SettingsDefaults, TrainerSettingsEqualTheSchema) {
  const TrainerSettings read = trainer_settings(default_configuration());
  const TrainerSettings def;
  EXPECT_DEFAULT(read, def, run_dir, "run.output_dir");
  EXPECT_DEFAULT(read, def, seed, "run.seed");
  EXPECT_DEFAULT(read, def, resume, "run.resume");
  EXPECT_DEFAULT(read, def, resume_from, "run.resume_from");
  EXPECT_DEFAULT(read, def, steps, "train.steps");
  EXPECT_DEFAULT(read, def, num_prompts, "rollout.num_unique_prompts");
  EXPECT_DEFAULT(read, def, group_size, "rollout.num_samples_per_prompt");
  EXPECT_DEFAULT(read, def, temperature, "rollout.temperature");
  EXPECT_DEFAULT(read, def, top_p, "rollout.top_p");
  EXPECT_DEFAULT(read, def, min_p, "rollout.min_p");
  EXPECT_DEFAULT(read, def, top_k, "rollout.top_k");
  EXPECT_DEFAULT(read, def, max_new_tokens, "rollout.max_new_tokens");
  EXPECT_DEFAULT(read, def, max_prompt_tokens, "rollout.max_prompt_tokens");
  EXPECT_DEFAULT(read, def, stop_strings, "rollout.stop_strings");
  EXPECT_DEFAULT(read, def, async_steps, "rollout.async_steps");
  EXPECT_DEFAULT(read, def, samples_every, "log.samples_every");
  EXPECT_DEFAULT(read, def, samples_per_step, "log.samples_per_step");
  EXPECT_DEFAULT(read.tools, def.tools, parser, "rollout.tools.parser");
  EXPECT_DEFAULT(read.tools, def.tools, max_calls, "rollout.tools.max_calls");
  EXPECT_DEFAULT(read.tools, def.tools, timeout_s, "rollout.tools.timeout_s");
  EXPECT_DEFAULT(read.tools, def.tools, observation, "rollout.tools.observation");
  EXPECT_DEFAULT(read.tools, def.tools, max_observation_tokens, "rollout.tools.max_observation_tokens");
  EXPECT_DEFAULT(read.tools, def.tools, reuse_kv_cache, "rollout.tools.reuse_kv_cache");
  EXPECT_DEFAULT(read.tools, def.tools, resume_as_ready, "rollout.tools.resume_as_ready");
  EXPECT_DEFAULT(read.tools, def.tools, threads, "rollout.tools.num_threads");
  EXPECT_DEFAULT(read, def, filter_zero_std, "algorithm.filter_zero_std_groups");
  EXPECT_DEFAULT(read, def, active_sampling, "algorithm.active_sampling");
  EXPECT_DEFAULT(read, def, active_sampling_max_batches, "algorithm.active_sampling_max_batches");
  EXPECT_DEFAULT(read, def, ref_update_freq, "train.ref_update_freq");
  EXPECT_DEFAULT(read, def, ref_update_alpha, "train.ref_update_alpha");
  EXPECT_DEFAULT(read, def, max_nonfinite_steps, "train.max_nonfinite_steps");
  EXPECT_DEFAULT(read, def, eval_every, "eval.every");
  EXPECT_DEFAULT(read, def, eval_at_start, "eval.at_start");
  EXPECT_DEFAULT(read, def, eval_num_samples, "eval.num_samples");
  EXPECT_DEFAULT(read, def, eval_pass_k, "eval.pass_k");
  EXPECT_DEFAULT(read, def, eval_temperature, "eval.temperature");
  EXPECT_DEFAULT(read, def, eval_max_prompts, "eval.max_prompts");
  EXPECT_DEFAULT(read, def, save_freq, "checkpoint.save_freq");
  EXPECT_DEFAULT(read, def, keep_last, "checkpoint.keep_last");
  EXPECT_DEFAULT(read, def, chat_template, "tokenizer.chat_template");
  expect_optimizer_defaults(read.optimizer, "TrainerSettings::optimizer");

  const UpdateOptions& u = read.update;
  const UpdateOptions u_def;
  EXPECT_DEFAULT(u, u_def, num_epochs, "train.num_epochs");
  EXPECT_DEFAULT(u, u_def, num_mini_batches, "train.num_mini_batches");
  EXPECT_DEFAULT(u, u_def, rows_per_micro_batch, "train.per_device_train_batch_size");
  EXPECT_DEFAULT(u, u_def, pack_length, "train.pack_length");
  EXPECT_DEFAULT(u, u_def, temperature, "rollout.temperature (the update's copy)");
  EXPECT_DEFAULT(u, u_def, logprob_chunk_tokens, "train.logprob_chunk_tokens");
  EXPECT_DEFAULT(u, u_def, max_grad_norm, "train.max_grad_norm (the update's copy)");
  EXPECT_DEFAULT(u, u_def, router_aux_loss_coef, "train.router_aux_loss_coef");
  EXPECT_DEFAULT(u, u_def, old_logprobs, "train.old_logprobs");
  EXPECT_DEFAULT(u, u_def, aggregation, "algorithm.loss_aggregation");
  expect_kl_and_mismatch_defaults(u.kl, u.mismatch, "TrainerSettings::update");
  // No schema key: set per step by the trainer (stale) or only by tests (with_entropy).
  EXPECT_DEFAULT(u, u_def, stale, "(no key)");
  EXPECT_DEFAULT(u, u_def, with_entropy, "(no key)");
  // Intentionally different: UpdateOptions::max_response_len is 0 ("the widest mask") for
  // callers of update_policy that set nothing; the trainer always copies rollout.max_new_tokens.
  EXPECT_EQ(u.max_response_len, read.max_new_tokens);
  EXPECT_EQ(u_def.max_response_len, 0);
}

TEST(SettingsDefaults, OptimizerSettingsEqualTheSchema) {
  expect_optimizer_defaults(optimizer_settings(default_configuration()), "optimizer_settings");
}

TEST(SettingsDefaults, AlgorithmSettingsEqualTheSchema) {
  const AlgorithmSettings read = algorithm_settings(default_configuration());
  const AlgorithmSettings def;
  EXPECT_DEFAULT(read, def, loss_aggregation, "algorithm.loss_aggregation");
  expect_kl_and_mismatch_defaults(read.kl, read.mismatch, "algorithm_settings");
}

TEST(SettingsDefaults, RewardOptionsEqualTheSchema) {
  const RewardOptions read = reward_options(default_configuration());
  const RewardOptions def;
  EXPECT_DEFAULT(read, def, verification_reward, "reward.verification_reward");
  EXPECT_DEFAULT(read, def, format_verifier, "reward.format_verifier");
  EXPECT_DEFAULT(read, def, format_additive, "reward.format_mode");
  EXPECT_DEFAULT(read, def, non_stop_penalty, "reward.non_stop_penalty");
  EXPECT_DEFAULT(read, def, non_stop_penalty_value, "reward.non_stop_penalty_value");
  EXPECT_DEFAULT(read, def, overlong_buffer, "reward.overlong_buffer");
  EXPECT_DEFAULT(read, def, overlong_penalty_factor, "reward.overlong_penalty_factor");
  EXPECT_DEFAULT(read, def, max_new_tokens, "rollout.max_new_tokens (the reward's copy)");
  EXPECT_DEFAULT(read, def, mask_truncated_completions, "reward.mask_truncated_completions");
  EXPECT_DEFAULT(read, def, num_threads, "reward.num_threads");
  EXPECT_DEFAULT(read, def, timeout_s, "reward.timeout_s");
}

TEST(SettingsDefaults, RewardModelSettingsEqualTheSchema) {
  const RewardModelSettings read = reward_model_settings(default_configuration());
  const RewardModelSettings def;
  EXPECT_DEFAULT(read, def, path, "reward_model.path");
  EXPECT_DEFAULT(read, def, weight, "reward_model.weight");
  EXPECT_DEFAULT(read, def, normalize, "reward_model.normalize");
  EXPECT_DEFAULT(read, def, batch_size, "reward_model.batch_size");
  EXPECT_DEFAULT(read, def, max_tokens, "reward_model.max_tokens");
  EXPECT_DEFAULT(read, def, chat_template, "reward_model.chat_template");
}

TEST(SettingsDefaults, DataOptionsEqualTheSchema) {
  const DataOptions read = data_options(default_configuration());
  const DataOptions def;
  expect_data_defaults(read, def);
  EXPECT_DEFAULT(read, def, require_ground_truth, "(no key: grpo-run's requirement)");
  EXPECT_DEFAULT(read, def, require_completion, "(no key: grpo-run's requirement)");
}

TEST(SettingsDefaults, SftSettingsEqualTheSchema) {
  const SftSettings read = sft_settings(default_configuration());
  const SftSettings def;
  EXPECT_DEFAULT(read, def, run_dir, "run.output_dir");
  EXPECT_DEFAULT(read, def, seed, "run.seed");
  EXPECT_DEFAULT(read, def, resume, "run.resume");
  EXPECT_DEFAULT(read, def, resume_from, "run.resume_from");
  EXPECT_DEFAULT(read, def, steps, "sft.steps");
  EXPECT_DEFAULT(read, def, batch_size, "sft.batch_size");
  EXPECT_DEFAULT(read, def, random_init, "sft.init");
  EXPECT_DEFAULT(read, def, eval_every, "sft.eval_every");
  EXPECT_DEFAULT(read, def, pack_length, "train.pack_length");
  EXPECT_DEFAULT(read, def, rows_per_micro_batch, "train.per_device_train_batch_size");
  EXPECT_DEFAULT(read, def, logprob_chunk_tokens, "train.logprob_chunk_tokens");
  EXPECT_DEFAULT(read, def, save_freq, "checkpoint.save_freq");
  EXPECT_DEFAULT(read, def, keep_last, "checkpoint.keep_last");
  EXPECT_DEFAULT(read, def, chat_template, "tokenizer.chat_template");
  expect_optimizer_defaults(read.optimizer, "SftSettings::optimizer");
  expect_data_defaults(read.data, def.data);
  // Intentionally different from DataOptions{}: grpo-sft trains on completions and needs no
  // ground truth; sft_settings sets both (no key).
  EXPECT_FALSE(read.data.require_ground_truth);
  EXPECT_TRUE(read.data.require_completion);
}

TEST(SettingsDefaults, DistOptionsEqualTheSchema) {
  const dist::DistOptions read = dist::dist_options(default_configuration());
  const dist::DistOptions def;
  EXPECT_DEFAULT(read, def, launcher, "dist.launcher");
  EXPECT_DEFAULT(read, def, backend, "dist.backend");
  EXPECT_DEFAULT(read, def, timeout_s, "dist.timeout_s");
  EXPECT_DEFAULT(read, def, heartbeat_s, "dist.heartbeat_s");
  EXPECT_DEFAULT(read, def, bucket_mb, "dist.bucket_mb");
}

TEST(SettingsDefaults, TrainingJobSettingsHoldTheSameDefaults) {
  const TrainingJobSettings job = training_job_settings(default_configuration());
  expect_data_defaults(job.data, DataOptions{});
  EXPECT_EQ(job.rewards.timeout_s, RewardOptions{}.timeout_s);
  EXPECT_EQ(job.trainer.keep_last, TrainerSettings{}.keep_last);
}

// The comparison sees a value that differs from the member initializer (as a changed schema
// default would make it): the check above is not vacuous.
TEST(SettingsDefaults, AChangedValueIsSeen) {
  const TrainerSettings read = trainer_settings(load_config(ConfigSources{{}, {"checkpoint.keep_last=5"}}));
  EXPECT_NE(read.keep_last, TrainerSettings{}.keep_last);
}

}  // namespace
