// Trainer checkpoints: RUN_DIR/checkpoints/step_000010/ holds the policy as a Hugging Face
// folder (config.json, model.safetensors, tokenizer files: loads straight into transformers)
// plus what an exact resume needs: trainer_state.json (step, optimizer steps, data position,
// counters, the rollout queue policy), optimizer.pt (AdamW moments), rng.pt (LibTorch's CPU
// generator) and, when the reference model is Polyak-updated, reference.safetensors.
//
// A checkpoint is written under a hidden staging name (.step_000010.partial) and renamed into
// place only when every file is complete, so a kill during a save never leaves a folder that
// looks complete; `trainer_state.json` is written last as a second guard. Leftover staging
// folders are removed by the next save.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/data/dataset.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/transformer.h"

namespace grpo::core {

class Tokenizer;

struct TrainerState {
  std::int64_t step = 0;              // training steps completed
  std::int64_t optimizer_steps = 0;   // drives the LR schedule
  PromptSampler::Position data;       // position after the last consumed batch
  std::int64_t consecutive_nonfinite = 0;
  std::int64_t stale_batches_dropped = 0;
  std::int64_t async_steps = 0;       // rollout queue policy the run used
  std::uint64_t seed = 0;
};

struct CheckpointContents {
  CausalLM* policy = nullptr;                   // required
  torch::optim::Optimizer* optimizer = nullptr; // required
  CausalLM* reference = nullptr;                // saved only when it is not frozen (Polyak updates)
  const Tokenizer* tokenizer = nullptr;
  std::string chat_template_name = "chatml";
  std::string generation_config_json;
};

// Writes the checkpoint of state.step atomically; then deletes complete checkpoints beyond
// the newest `keep_last` (0 = keep all).
void save_checkpoint(const std::string& run_dir, const TrainerState& state, const CheckpointContents& contents,
                     std::int64_t keep_last);

// --resume: restores `state` and `contents` from the newest complete checkpoint of run_dir and
// returns true (logged); without one, warns and returns false (a fresh start). A checkpoint
// written with another run.seed is a ConfigError naming run.seed.
bool resume_from_latest_checkpoint(const sdk::ConfigValue& config, const std::string& run_dir, std::uint64_t seed,
                                   const CheckpointContents& contents, TrainerState& state);

// Restores policy weights, optimizer, RNG, reference (when saved and `contents.reference` is
// set) and returns the trainer state. Errors name the folder and file.
TrainerState load_checkpoint(const std::string& dir, const CheckpointContents& contents);

}  // namespace grpo::core
