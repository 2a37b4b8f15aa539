// Supervised fine-tuning (grpo-sft): the warm start before GRPO. Cross-entropy on completion
// tokens only (the prompt is context, not a target), sequences packed into rows of
// train.pack_length exactly as the policy update packs them, token-mean loss with one global
// denominator per optimizer step, AdamW with the trainer's LR schedules and clipping.
//
// It shares grpo-run's pieces: the data loaders (core/data: open-instruct chats with a
// trailing assistant turn, or TRL prompt + completion), prompt rendering with the chat
// template, packing, the optimizer, and the checkpoint folders (RUN_DIR/checkpoints/
// step_N/: a Hugging Face model folder + trainer_state.json, so `--resume` works and
// grpo-run's model.path can point at the result). docs/quickstart.md shows it in use.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/model/precision.h"
#include "core/optim/optimizer.h"
#include "core/runtime/policy.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

// Member defaults equal the schema's (tests/train/test_settings_defaults.cpp).
struct SftSettings {
  std::string run_dir = "runs/grpo";
  std::uint64_t seed = 1;
  bool resume = false;
  std::int64_t resume_from = 0;   // run.resume_from: 0 = the newest loadable checkpoint
  std::int64_t steps = 300;       // sft.steps: optimizer steps
  std::int64_t batch_size = 64;   // sft.batch_size: sequences per optimizer step
  bool random_init = false;       // sft.init: random
  std::int64_t eval_every = 0;    // sft.eval_every
  std::int64_t pack_length = 2048;
  std::int64_t rows_per_micro_batch = 1;
  std::int64_t logprob_chunk_tokens = 1024;
  Precision precision = Precision::kFp32;  // train.precision (resolved against model.dtype)
  bool gradient_checkpointing = false;     // train.gradient_checkpointing
  std::int64_t save_freq = 0;
  std::int64_t keep_last = 2;
  std::string chat_template = "auto";  // tokenizer.chat_template
  std::string chat_template_kwargs = "{}";  // tokenizer.chat_template_kwargs, as JSON text
  OptimizerSettings optimizer;    // train.*
  DataOptions data;               // data.*, with completions required and ground truths not
};

// The sft.*, train.* (optimizer, packing), run.*, checkpoint.*, data.* keys of a validated
// configuration; errors are sdk::ConfigError naming the key.
SftSettings sft_settings(const sdk::ConfigValue& root);

// Runs supervised training of `policy` (loaded, or built from config.json with random
// weights when sft.init is random) with `settings` (sft_settings of the validated `config`,
// read once by the app; `config` is only the place errors point at). Bad data is a DataError
// naming file and line, bad keys a ConfigError, both before the first step.
void run_sft(const SftSettings& settings, const sdk::ConfigValue& config, LoadedPolicy& policy, const PolicySpec& policy_spec);

}  // namespace grpo::core
