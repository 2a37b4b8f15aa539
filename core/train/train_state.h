// Trainer checkpoints: RUN_DIR/checkpoints/step_000010/ holds the policy as a Hugging Face
// folder (config.json, model.safetensors, tokenizer files: loads straight into transformers),
// or with LoRA as a PEFT adapter folder (adapter_config.json, adapter_model.safetensors,
// tokenizer files: loads with PeftModel.from_pretrained over the base), plus what an exact
// resume needs: trainer_state.json (step, optimizer steps, data position,
// counters, the rollout queue policy), optimizer.pt (AdamW moments), rng.pt (LibTorch's CPU
// generator; with LoRA also the adapters' dropout generator) and, when the reference model is Polyak-updated, reference.safetensors.
//
// Durability: every file goes through the atomic writer (fsynced) into a hidden staging folder
// (.step_000010.partial) that is renamed into place only when every file is complete
// (replace_directory: the staging folder fsynced before, checkpoints/ after), so neither a kill
// nor a power cut leaves a folder that looks complete; `trainer_state.json` is written last as a
// second guard and records each other file's size and CRC-32C. A failed save (a full disk, ...)
// removes its staging folder and leaves the earlier checkpoints as they were; staging folders
// an interrupted process left are removed at start-up (remove_checkpoint_staging) and by the
// next save.
//
// Loading reads and verifies everything first (sizes, checksums, every file parsed into
// memory) and only then restores the model, optimizer and generator, so a damaged checkpoint
// is rejected before it changes anything. Resume falls back from a newest checkpoint that
// cannot be loaded to the next older one, saying why.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/data/dataset.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"

namespace grpo::core {

class Tokenizer;
namespace dist {
class Parallelism;
}  // namespace dist

// One file of a checkpoint folder as trainer_state.json records it.
struct CheckpointFile {
  std::uint64_t size = 0;    // bytes
  std::uint32_t crc32c = 0;  // CRC-32C of the bytes (core/metrics/crc32c.h)
};

struct TrainerState {
  std::int64_t step = 0;              // training steps completed
  std::int64_t optimizer_steps = 0;   // drives the LR schedule
  PromptSampler::Position data;       // position after the last consumed batch
  std::int64_t consecutive_nonfinite = 0;
  std::int64_t stale_batches_dropped = 0;
  std::int64_t async_steps = 0;       // rollout queue policy the run used
  std::uint64_t seed = 0;
  // Every other file of the checkpoint this state was saved to or loaded from, by name;
  // set by save_checkpoint and load_checkpoint (what the caller passes in is ignored).
  std::map<std::string, CheckpointFile> files;
};

struct CheckpointContents {
  CausalLM* policy = nullptr;                   // required
  torch::optim::Optimizer* optimizer = nullptr; // required
  CausalLM* reference = nullptr;                // saved only when it is not frozen (Polyak updates)
  const Tokenizer* tokenizer = nullptr;
  std::vector<NamedChatTemplate> chat_templates;  // written into tokenizer_config.json
  std::string generation_config_json;
  // model.lora: the checkpoint holds these adapters as a PEFT adapter folder (adapter_config.json
  // with base_model_name_or_path = lora_base_model, adapter_model.safetensors) plus the tokenizer
  // files, instead of the policy's weights; `policy` is still the model they are attached to.
  LoraAdapters* lora = nullptr;
  std::string lora_base_model;
  // dist.sharding: the optimizer state is one shard per rank (optimizer_shard_file), written by
  // every rank into the folder rank 0 prepared (prepare_optimizer_shards, save_optimizer_shard)
  // instead of optimizer.pt; this rank's is loaded. 0: optimizer.pt.
  int shard_world = 0;
  int shard_rank = 0;
};

// "optimizer_shard_00001_of_00004.pt": rank 1's optimizer shard of a 4-rank run.
std::string optimizer_shard_file(int rank, int world);

// Sharded optimizers, rank 0: clears the staging leftovers of killed saves and creates the
// folder every rank then writes its shard of step `step` into (optimizer_shards_path, the same
// path on every rank), before rank 0's save_checkpoint moves them into the checkpoint.
void prepare_optimizer_shards(const std::string& run_dir, std::int64_t step);
std::string optimizer_shards_path(const std::string& run_dir, std::int64_t step);
// This rank's shard of `optimizer` into that folder, atomically (CheckpointError on failure).
void save_optimizer_shard(const std::string& run_dir, std::int64_t step, torch::optim::Optimizer& optimizer, int rank, int world);

// Writes the checkpoint of state.step atomically and durably (with contents.shard_world > 0, with
// the optimizer shards every rank saved: save_optimizer_shard), then deletes complete checkpoints
// beyond the newest `keep_last` (0 = keep all). A folder of the same step already there, and
// complete checkpoints of later steps (a history the run left when it resumed from an older
// checkpoint) are moved to checkpoints/superseded/, with a warning, never deleted. Returns the
// state as written (with `files`).
// Any failure is a CheckpointError (core/model/checkpoint.h) naming the checkpoint and the
// cause; the staging folder is removed and the earlier checkpoints are untouched.
TrainerState save_checkpoint(const std::string& run_dir, const TrainerState& state, const CheckpointContents& contents,
                             std::int64_t keep_last);

// The checkpoint of state.step as the run's parallelism writes it (core/dist/parallelism.h):
// rank 0 alone where every rank holds the same state; where each rank holds its part of the
// optimizer, rank 0 prepares the folder, every rank writes its part, rank 0 completes it with
// the whole model, and no rank goes on before the checkpoint is complete (a failure is
// announced to the others). Errors as save_checkpoint's. Collective under data parallel.
void save_training_checkpoint(dist::Parallelism& parallel, const std::string& run_dir, const TrainerState& state,
                              const CheckpointContents& contents, std::int64_t keep_last);

// Resume (run.resume, run.resume_from): restores `state` and `contents` and returns true (logged).
//   step == 0: the newest complete checkpoint of run_dir; one that cannot be loaded (a missing
//              file, a size or checksum that differs from its record, a file that does not
//              parse or fit the model) is skipped with a warning saying why, for the next older
//              one. None loading is a CheckpointError naming each; no complete checkpoint at
//              all warns and returns false (a fresh start).
//   step > 0:  that step's checkpoint, without fallback: a ConfigError naming run.resume_from
//              when it is not a complete checkpoint, a CheckpointError when it cannot be loaded.
// A checkpoint written with another run.seed, or by another model.lora (whole model vs adapters,
// r, lora_alpha, target_modules), is a ConfigError naming that key, found at the newest checkpoint
// whose files verify (no fallback: every older one was written the same way).
bool resume_from_checkpoint(const sdk::ConfigValue& config, const std::string& run_dir, std::uint64_t seed,
                            std::int64_t step, const CheckpointContents& contents, TrainerState& state);

// Verifies the folder (every recorded file's size and CRC-32C, every file parsed), then restores
// policy weights, optimizer, LibTorch's default CPU generator and the reference (when saved and
// `contents.reference` is set), and returns the trainer state. Errors are CheckpointErrors
// naming the folder and file; one found while verifying leaves everything as it was. (The
// restore itself can fail only for a checkpoint that does not fit these models or optimizer,
// after the policy may have been restored: a resume then restores all of it again from the
// next checkpoint, or stops.)
TrainerState load_checkpoint(const std::string& dir, const CheckpointContents& contents);

}  // namespace grpo::core
