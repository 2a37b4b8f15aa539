// The trainer's settings, read once from a validated configuration and passed inward.
//
// grpo-run and grpo-eval build a TrainingJobSettings at start-up (training_job_settings) and
// hand it to run_training / run_evaluation; nothing below them reads a setting from the raw
// tree again (the tree still travels along for error locations and the data-parallel
// configuration check, see trainer.h).
//
// Defaults: a validated configuration always holds every key (the schema table of
// core/config/schema.cpp fills the defaults), so the readers' fallbacks are the structs'
// member initializers, never literals. tests/train/test_settings_defaults.cpp checks that the
// member initializers equal the schema's defaults, field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/algo/algorithm_settings.h"
#include "core/data/dataset.h"
#include "core/dist/sharding.h"
#include "core/optim/optimizer.h"
#include "core/tools/tool_rollout.h"
#include "core/train/policy_update.h"
#include "core/train/reward_model.h"
#include "core/train/rewards.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

struct TrainerSettings {
  std::string run_dir = "runs/grpo";  // run.output_dir
  std::uint64_t seed = 1;
  bool resume = false;
  std::int64_t resume_from = 0;       // run.resume_from: 0 = the newest loadable checkpoint
  std::int64_t steps = 100;

  std::int64_t num_prompts = 16;       // rollout.num_unique_prompts
  std::int64_t group_size = 8;         // rollout.num_samples_per_prompt
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  std::int64_t top_k = -1;
  std::int64_t max_new_tokens = 256;
  std::int64_t max_prompt_tokens = 256;
  std::vector<std::string> stop_strings;
  std::int64_t async_steps = 1;
  ToolRolloutSettings tools;           // rollout.tools.* (used when the config has `tools`)
  std::int64_t samples_every = 10;     // log.samples_every
  std::int64_t samples_per_step = 4;   // log.samples_per_step

  bool filter_zero_std = true;         // algorithm.filter_zero_std_groups
  bool active_sampling = false;
  std::int64_t active_sampling_max_batches = 4;

  // bf16-mixed with a native engine running bfloat16 (the default then): weight snapshots for
  // the engine are made in bfloat16, one cast per step instead of a float32 copy and a cast.
  bool bf16_weight_snapshots = false;
  AlgorithmSettings algorithm;         // algorithm.* as read (grpo-run logs describe() of it)
  UpdateOptions update;                // train.* of the policy update, with the algorithm.* settings
  OptimizerSettings optimizer;
  dist::Sharding sharding = dist::Sharding::kNone;  // dist.sharding (data parallel only: core/dist/parallelism.h)
  std::int64_t ref_update_freq = 0;
  double ref_update_alpha = 0.6;
  std::int64_t max_nonfinite_steps = 3;
  bool gradient_checkpointing = false;  // train.gradient_checkpointing

  std::int64_t eval_every = 0;
  bool eval_at_start = true;
  std::int64_t eval_num_samples = 1;
  std::int64_t eval_pass_k = 1;
  double eval_temperature = 0.0;
  std::int64_t eval_max_prompts = 0;

  std::int64_t save_freq = 0;          // checkpoint.*
  std::int64_t keep_last = 2;

  std::string chat_template = "auto";  // tokenizer.chat_template
  std::string chat_template_kwargs = "{}";  // tokenizer.chat_template_kwargs, as JSON text
};

// Every train/rollout/eval/checkpoint key of a validated configuration, checked across keys
// (e.g. train.pack_length must hold rollout.max_prompt_tokens + rollout.max_new_tokens); errors
// are sdk::ConfigError naming the key's file and line.
TrainerSettings trainer_settings(const sdk::ConfigValue& root);

// The sampling parameters of training rollouts (rollout.*). Evaluation starts from these too.
sdk::SamplingParams training_sampling(const TrainerSettings& settings);

// Everything the training and evaluation jobs read from the configuration, in one place.
struct TrainingJobSettings {
  TrainerSettings trainer;
  DataOptions data;       // data.*
  RewardOptions rewards;  // reward.* (and rollout.max_new_tokens)
  RewardModelSettings reward_model;  // reward_model.*
};

// trainer_settings, data_options and reward_options of one validated configuration, read in
// that order (the first bad key is the one reported). Errors as trainer_settings.
TrainingJobSettings training_job_settings(const sdk::ConfigValue& root);

}  // namespace grpo::core
