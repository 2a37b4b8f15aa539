// The policy model and its tokenizer as a configuration names them (model.*, tokenizer.*):
// checked up front by `grpo-run --validate` (files exist and parse) and loaded by the run.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/attention/backend.h"
#include "core/model/checkpoint.h"
#include "core/model/lora.h"
#include "core/model/precision.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct PolicySpec {
  std::string model_path;          // "" = no model configured
  std::string dtype = "float32";   // model.dtype: what the weights are stored (loaded, updated, saved) in
  Precision precision = Precision::kFp32;  // train.precision, resolved against model.dtype
  torch::Device device = torch::kCPU;      // model.device (data-parallel: see bind_local_cuda_device)
  std::string tokenizer_path;      // resolved: tokenizer.path, else model.path
  std::string chat_template = "auto";  // tokenizer.chat_template
  AttentionBackend attention = AttentionBackend::kAuto;  // model.attention
  bool deterministic = false;  // run.deterministic: applied (process-wide) when the policy loads
  const sdk::ConfigValue* model_node = nullptr;      // for error locations
  const sdk::ConfigValue* tokenizer_node = nullptr;  // the node tokenizer_path came from
  const sdk::ConfigValue* chat_template_node = nullptr;
  LoraSettings lora;               // model.lora.* (r = 0: no LoRA); with adapter_path, the adapter's settings
  std::uint64_t lora_seed = 1;     // run.seed: fresh adapters' initialization
  const sdk::ConfigValue* lora_node = nullptr;  // model.lora, for error locations
  std::vector<std::string> lora_requested_targets;  // target_modules set beside adapter_path (checked against it)
};

// What a model path naming a run directory of grpo-sft or grpo-run (a folder with no
// config.json that holds a complete checkpoint) stands for: its newest complete checkpoint.
// nullopt for anything else (a model folder, a missing path), left to the caller's own checks.
// The one rule for model.path and the apps' model flags (grpo-export --base).
struct RunDirectoryCheckpoint {
  std::string path;          // the newest complete checkpoint folder
  bool adapter = false;      // a PEFT adapter (a LoRA run), not a model
  std::string adapter_base;  // then its base_model_name_or_path ("" when unreadable)
};
std::optional<RunDirectoryCheckpoint> run_directory_checkpoint(const std::string& path);

// model.path may name a run directory of grpo-sft or grpo-run instead of a model folder: when
// it has no config.json but holds a complete checkpoint, model.path (and with it the rollout
// backend's model and the tokenizer) becomes the newest checkpoint folder, logged. Call once,
// right after the configuration is loaded.
void resolve_model_path(sdk::ConfigValue& root);

// Reads model.*, tokenizer.* and train.precision of a validated configuration, and checks
// them before any model is loaded (sdk::ConfigError naming the key):
//   train.precision auto = fp32 for model.dtype float32, bf16 for bfloat16; fp32 and
//   bf16-mixed need float32 weights (the masters), bf16 needs model.dtype bfloat16;
//   model.device cpu | cuda | cuda:N must exist in this build and on this machine;
//   model.lora.*: r >= 1 when set (an explicit 0 is an error), the other keys only with r or
//   adapter_path, lora_alpha > 0, lora_dropout in [0, 1); adapter_path's adapter_config.json is
//   read (its r, lora_alpha, use_rslora and target_modules apply; a different value set in the
//   configuration is an error naming both).
// A bf16 precision on a CPU without avx512_bf16/amx_bf16 is a warning: it runs, slowly.
PolicySpec policy_spec(const sdk::ConfigValue& root);

// train.precision resolved against model.dtype (the rules and errors of policy_spec).
Precision training_precision(const sdk::ConfigValue& root);

// model.device of a validated configuration as a device that exists (errors as policy_spec).
torch::Device policy_device(const sdk::ConfigValue& root);

// A data-parallel rank's device: model.device `cuda` (and the rollout backend's `device` when
// it is `cuda`) becomes cuda:LOCAL_RANK, so the ranks of a host use one GPU each.
void bind_local_cuda_device(sdk::ConfigValue& root, int local_rank);

struct PolicyFiles {
  ModelConfig model_config;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // tokenizer.chat_template resolved (with a tokenizer)
};

// Parses config.json, scans the model's weight files for NaN and infinities (a memory-bound
// raw scan of the mapped files, nothing loaded; a folder without weights is skipped), loads the
// tokenizer and resolves and parses the chat template, and with model.lora checks the targets
// against config.json and adapter_path's tensors against them (shapes; finite values, as every
// load does). `auto` without a template in the tokenizer's files is a logged warning and the
// built-in chatml. Problems are sdk::ConfigError naming the config key's location and the
// file's own error, e.g.
//   "run.yaml:3:9: model.path: models/q/config.json: use_sliding_window: ... not supported".
PolicyFiles check_policy_files(const PolicySpec& spec);

struct LoadedPolicy {
  LoadedModel model;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  // model.lora: the adapters attached to `model` (its base weights frozen), else null.
  std::shared_ptr<LoraAdapters> lora;
};

// check_policy_files() and then the weights; with model.lora, the adapters (fresh, or read
// from adapter_path) attached. The weights are not scanned twice: the load checks each value it
// copies. Weight files that cannot be used (unreadable, NaN, tensors that do not fit
// config.json) are sdk::ConfigError naming model.path, as adapter_path's are. Applies
// run.deterministic first.
LoadedPolicy load_policy(const PolicySpec& spec);

// run.deterministic (core/model/precision.h: use_deterministic_algorithms), logged when on;
// before anything computes.
void apply_determinism(const PolicySpec& spec);

// Attaches spec.lora's adapters to policy.model (fresh from spec.lora_seed, or loaded from
// spec.lora.adapter_path); errors are sdk::ConfigError naming the model.lora key.
void attach_lora(const PolicySpec& spec, LoadedPolicy& policy);

}  // namespace grpo::core
