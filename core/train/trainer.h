// The GRPO trainer: grpo-run's training job.
//
// One step: prompts from the training mixture -> a group of completions each from the rollout
// backend (on the rollout thread, up to rollout.async_steps policy versions ahead) -> verifiers
// on a thread pool -> reward shaping -> zero-std filtering / active sampling -> advantages
// (the configured estimator) -> policy update (packing, policy loss, KL, aggregation, AdamW,
// LR schedule) -> weight sync -> metrics, evaluation, checkpoint. docs/training.md has the
// whole picture; every key is in docs/config.md.
//
// The stages live in their own files: trainer_settings.h (the settings, read once),
// trainer_setup.h (checks and loading before the first step), rollout_worker.h (generation and
// scoring), advantages.h, policy_update.h, evaluation.h, train_state.h (checkpoints).
//
// Determinism: the prompt order, the sampling seeds (derived from run.seed, the step and the
// prompt's slot) and the policy version each batch is generated with are functions of the
// step alone, so a run is reproducible and, in sync mode, a resumed run continues exactly as
// the uninterrupted one would (bit-identical weights).
#pragma once

#include "core/runtime/components.h"
#include "core/runtime/policy.h"
#include "core/train/evaluation.h"
#include "core/train/trainer_settings.h"
#include "core/train/trainer_setup.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

namespace dist {
class Distributed;
}

// Runs the training job `job` (check_training_job of the validated `config`, built once by the
// app: the settings, components and prompts; its prompts are moved into the trainer). `config`
// is used for what settings cannot carry: the location of errors (sdk::ConfigError naming a
// key's file and line) and, data-parallel, the comparison of every rank's effective
// configuration. Everything that can be checked is checked before the first step; errors are
// sdk::ConfigError (configuration), DataError (a row: file and line) or std::runtime_error.
//
// The policy trains in place (policy.model.model, on its device and in its dtype); every
// tensor the trainer creates takes the model's device.
//
// Data-parallel (`distributed` given, docs/distributed.md): every rank runs this with the same
// configuration; each generates and scores its share of every step's prompts (whole groups),
// advantages are computed over the global batch, gradients are all-reduced, metrics reduced;
// rank 0 alone writes checkpoints, metrics.jsonl, TensorBoard events and curves, and every rank
// resumes from them. A lost peer is dist::PeerLostError; this rank's own failure is announced
// to the others before it is rethrown.
void run_training(CheckedTrainingJob& job, const sdk::ConfigValue& config, LoadedPolicy& policy,
                  dist::Distributed* distributed = nullptr);

}  // namespace grpo::core
