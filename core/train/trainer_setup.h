// What the trainer checks and loads before its first step: the components, the prompts of
// both splits (with their verifier labels), the reference model, and, data-parallel, that
// every rank runs the same configuration from the same step and rank 0's weights.
//
// Everything here fails before anything is trained, with errors that point at the
// configuration: sdk::ConfigError naming the key (through `config`, which is only used for
// error locations and the cross-rank comparison), DataError naming a row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/transformer.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/policy.h"
#include "core/train/rollout_worker.h"
#include "core/train/trainer_settings.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/torch/advantage.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

namespace dist {
class Distributed;
}

// The components a training run uses, not owned (`components` keeps them alive).
struct TrainingComponents {
  sdk::RolloutBackend* backend = nullptr;            // required
  const sdk::AdvantageEstimator* advantage = nullptr;  // required
  const sdk::PolicyLoss* policy_loss = nullptr;       // required
  const sdk::KlEstimator* kl_estimator = nullptr;     // null unless configured
};

// Checks, in this order, that there is a policy model and a tokenizer, a rollout backend, an
// advantage estimator, a policy loss, a verifier and data.train, and (data-parallel) at least
// one prompt per rank and step. ConfigError naming the key otherwise; with `missing` given
// (--validate-fragment: a preset, a part of a job), the messages of the parts the configuration does
// not name are appended there instead, and the rank check still throws.
TrainingComponents training_components(const sdk::ConfigValue& config, const RuntimeComponents& components,
                                       bool has_model, bool has_tokenizer, const TrainingJobSettings& settings,
                                       int world_size, std::vector<std::string>* missing = nullptr);

struct TrainingPrompts {
  PromptSet train, eval;  // eval is empty without data.eval
};

// Loads and tokenizes data.train (named: training_components checks it; it must leave a row)
// and data.eval, checks that the verifiers can route every row (check_verifier_labels) and logs
// the row counts.
TrainingPrompts load_training_prompts(const TrainingJobSettings& settings, const sdk::ConfigValue& config,
                                      const RuntimeComponents& components, const Tokenizer& tokenizer);

// A training job as check_training_job found it: what training goes on with.
struct CheckedTrainingJob {
  TrainingJobSettings settings;
  PolicySpec policy;
  PolicyFiles files;             // the model's config.json parsed, the tokenizer loaded
  RuntimeComponents components;  // every configured component, constructed
  TrainingComponents parts;      // training_components' view of `components` (null parts: a fragment)
  TrainingPrompts prompts;       // data.train and data.eval, tokenized and routed to verifiers
  // --validate-fragment: training's message for each part the configuration does not name
  // (no model.path, no verifier, ...); the checks that need that part were skipped.
  std::vector<std::string> missing;
};

// Every check training runs before its first step that needs neither the weights, the run
// directory nor another rank, in training's order and with training's messages. grpo-run runs
// it before it loads the weights and as --validate, so the two cannot drift apart:
//   the settings (training_job_settings: train.*, rollout.*, the packing bound
//   train.pack_length >= rollout.max_prompt_tokens + rollout.max_new_tokens, eval.*,
//   checkpoint.*, data.*, reward.*), run.output_dir (check_run_output_dir: nothing is created),
//   model.* and tokenizer.* (policy_spec, check_policy_files),
//   the plugins and every component, what training needs (training_components), and the
//   prompts (load_training_prompts: data files, prompt lengths, verifier labels).
// `registry` must outlive the components. `world_size`: the job's ranks (for --validate, those of
// the launch it runs in: 1 outside torchrun, Slurm or mpirun).
// `fragment` (--validate-fragment): a part the configuration does not name is listed in `missing`
// instead of being an error. Throws what those functions throw.
CheckedTrainingJob check_training_job(const sdk::ConfigValue& config, PluginRegistry& registry, int world_size,
                                      bool fragment = false);

// The frozen reference model (model.path in model.dtype, eval mode, no gradients) when the KL
// penalty needs one (algorithm.kl_coef != 0), else an empty holder. Logged.
CausalLM load_reference_model(const TrainerSettings& settings, const PolicySpec& policy_spec);

// Data-parallel start: every rank must run the same configuration (to_yaml of `config`) and
// resume from the same step (a run directory that is not shared shows here); then every rank
// takes rank 0's weights. A collective: every rank calls it. std::runtime_error naming the
// first rank that differs and the first differing line.
void check_ranks_agree(dist::Distributed& distributed, const sdk::ConfigValue& config, std::int64_t resumed_step,
                       CausalLM& model);

}  // namespace grpo::core
