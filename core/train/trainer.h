// The GRPO trainer: grpo-run's training job.
//
// One step: prompts from the training mixture -> a group of completions each from the rollout
// backend (on the rollout thread, up to rollout.async_steps policy versions ahead) -> verifiers
// on a thread pool -> reward shaping -> zero-std filtering / active sampling -> advantages
// (the configured estimator) -> policy update (packing, policy loss, KL, aggregation, AdamW,
// LR schedule) -> weight sync -> metrics, evaluation, checkpoint. docs/training.md has the
// whole picture; every key is in docs/config.md.
//
// Determinism: the prompt order, the sampling seeds (derived from run.seed, the step and the
// prompt's slot) and the policy version each batch is generated with are functions of the
// step alone, so a run is reproducible and, in sync mode, a resumed run continues exactly as
// the uninterrupted one would (bit-identical weights).
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/runtime/components.h"
#include "core/runtime/policy.h"
#include "core/metrics/metrics_log.h"
#include "core/train/optimizer.h"
#include "core/train/policy_update.h"
#include "core/train/rewards.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

namespace dist {
class Distributed;
}

struct TrainerSettings {
  std::string run_dir;
  std::uint64_t seed = 1;
  bool resume = false;
  std::int64_t steps = 100;

  std::int64_t num_prompts = 16;       // rollout.num_unique_prompts
  std::int64_t group_size = 8;         // rollout.num_samples_per_prompt
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  std::int64_t top_k = -1;
  std::int64_t max_new_tokens = 256;
  std::int64_t max_prompt_tokens = 256;
  std::vector<std::string> stop_strings;
  std::int64_t async_steps = 1;

  bool filter_zero_std = true;
  bool active_sampling = false;
  std::int64_t active_sampling_max_batches = 4;

  UpdateOptions update;
  OptimizerSettings optimizer;
  std::int64_t ref_update_freq = 0;
  double ref_update_alpha = 0.6;
  std::int64_t max_nonfinite_steps = 3;

  std::int64_t eval_every = 0;
  bool eval_at_start = true;
  std::int64_t eval_num_samples = 1;
  std::int64_t eval_pass_k = 1;
  double eval_temperature = 0.0;
  std::int64_t eval_max_prompts = 0;

  std::int64_t save_freq = 0;
  std::int64_t keep_last = 2;

  std::string chat_template_name = "chatml";
};

// Every train/rollout/eval/checkpoint key of a validated configuration, checked across keys
// (e.g. train.pack_length must hold rollout.max_prompt_tokens + rollout.max_new_tokens); errors
// are sdk::ConfigError naming the key's file and line.
TrainerSettings trainer_settings(const sdk::ConfigValue& root);

// Runs the training job. Everything that can be checked is checked before the first step
// (data, verifier labels, components); errors are sdk::ConfigError (configuration),
// DataError (a row: file and line) or std::runtime_error.
//
// Data-parallel (`distributed` given, docs/distributed.md): every rank runs this with the same
// configuration; each generates and scores its share of every step's prompts (whole groups),
// advantages are computed over the global batch, gradients are all-reduced, metrics reduced;
// rank 0 alone writes checkpoints, metrics.jsonl, TensorBoard events and curves, and every rank
// resumes from them. A lost peer is dist::PeerLostError; this rank's own failure is announced
// to the others before it is rethrown.
void run_training(const sdk::ConfigValue& config, RuntimeComponents& components, LoadedPolicy& policy,
                  const PolicySpec& policy_spec, dist::Distributed* distributed = nullptr);

// What one evaluation found: the eval/* metrics (as in metrics.jsonl) and every sample.
struct EvalSample {
  std::string where;  // "data/eval.jsonl:12"
  std::string prompt, completion;
  double reward = 0.0;
  bool correct = false;
};
struct EvaluationResult {
  MetricList metrics;
  std::vector<EvalSample> samples;
};

// Evaluates the rollout backend's model (as loaded from model.path) on data.eval with the
// eval.* settings, exactly as the trainer's evaluations do (grpo-eval). Errors as run_training.
EvaluationResult run_evaluation(const sdk::ConfigValue& config, RuntimeComponents& components, const Tokenizer& tokenizer);

}  // namespace grpo::core
